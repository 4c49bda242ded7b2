#pragma once
// NVML loaded at run time: dlopen of libnvidia-ml.so.1 (never the unversioned dev .so), dlsym
// of every export in nvml::kSymbols, nvmlInit_v2 on load and nvmlShutdown on destruction.
//
// Lifecycle and ownership: Load returns an initialised library; destroying it shuts NVML down
// and unloads it. Threads that may still be inside a call hold it by shared_ptr, so it is
// destroyed only after the last call returned.
//
// Errors: no library → kNotFound with dlerror's text; a required export missing → kNotFound
// naming it; nvmlInit_v2 failing → kUnavailable with nvmlErrorString's text. A missing
// optional export is not an error: Has() says so and a call through it returns
// NVML_ERROR_FUNCTION_NOT_FOUND, which callers treat like NOT_SUPPORTED (older driver).
//
// Every call through Call() is timed into stats() per NvmlFamily. Thread-safe (NVML itself is).
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collect/gpu/nvml_abi.h"
#include "collect/gpu/nvml_call_stats.h"
#include "core/result.h"
#include "core/time.h"

namespace ithbat::collect {

class NvmlLibrary {
 public:
  static constexpr std::string_view kDefaultSoname = "libnvidia-ml.so.1";

  static Result<std::unique_ptr<NvmlLibrary>> Load(const std::string& path_or_soname = std::string(kDefaultSoname));
  // As Load, with the exports named in `hidden` resolved as missing (tests: an older driver).
  static Result<std::unique_ptr<NvmlLibrary>> LoadForTest(const std::string& path_or_soname,
                                                          const std::vector<std::string>& hidden);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  bool Has(size_t symbol) const { return symbol < syms_.size() && syms_[symbol] != nullptr; }
  bool Has(std::string_view name) const { return Has(nvml::SymbolIndex(name)); }
  // The optional exports this library lacks (for the degraded reason).
  std::vector<std::string> MissingOptional() const;

  // Calls export `kSymbol` as Fn, timed under `family`.
  template <size_t kSymbol, class Fn, class... Args>
  nvml::nvmlReturn_t Call(NvmlFamily family, Args... args) {
    static_assert(kSymbol < nvml::kSymbols.size(), "unknown NVML export");
    void* p = syms_[kSymbol];
    if (p == nullptr) return nvml::NVML_ERROR_FUNCTION_NOT_FOUND;
    const TimeNs start = MonotonicNowNs();
    const nvml::nvmlReturn_t rc = reinterpret_cast<Fn>(p)(args...);
    stats_[static_cast<size_t>(family)].Record(MonotonicNowNs() - start);
    return rc;
  }

  // NVML's text for rc (nvmlErrorString), or "NVML error <rc>".
  std::string ErrorText(nvml::nvmlReturn_t rc) const;
  // rc as a Status: SUCCESS → Ok; NOT_SUPPORTED/FUNCTION_NOT_FOUND → kNotFound;
  // NO_PERMISSION → kPermission; TIMEOUT → kTimeout; GPU_IS_LOST and the rest → kUnavailable.
  Status ToStatus(nvml::nvmlReturn_t rc, std::string_view what) const;

  const NvmlCallStats& stats() const { return stats_; }
  const std::string& path() const { return path_; }

 private:
  NvmlLibrary() = default;
  static Result<std::unique_ptr<NvmlLibrary>> LoadImpl(const std::string& path, const std::vector<std::string>& hidden);

  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string path_;
  std::array<void*, nvml::kSymbols.size()> syms_{};
  NvmlCallStats stats_;
};

// NVML_CALL(lib, family, nvmlDeviceGetPowerUsage, dev, &mw): a timed call through the export of
// that name, type-checked against its nvml::<name>_fn typedef.
#define ITHBAT_NVML_CALL(lib, family, name, ...) \
  (lib).Call<::ithbat::nvml::SymbolIndex(#name), ::ithbat::nvml::name##_fn>(family __VA_OPT__(, ) __VA_ARGS__)

}  // namespace ithbat::collect
