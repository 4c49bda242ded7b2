#include "collect/gpu/nvml_library.h"

#include <dlfcn.h>

#include <algorithm>

namespace ithbat::collect {

using namespace ::ithbat::nvml;  // NOLINT: the ABI's names

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& path_or_soname) {
  return LoadImpl(path_or_soname, {});
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::LoadForTest(const std::string& path_or_soname,
                                                              const std::vector<std::string>& hidden) {
  return LoadImpl(path_or_soname, hidden);
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::LoadImpl(const std::string& path,
                                                           const std::vector<std::string>& hidden) {
  if (path.empty()) return MakeError(ErrorCode::kInvalidArgument, "empty NVML library path");
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    return MakeErrorF(ErrorCode::kNotFound, "cannot load NVML ({}): {}", path, e != nullptr ? e : "unknown error");
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = handle;
  lib->path_ = path;
  for (size_t i = 0; i < kSymbols.size(); i++) {
    const std::string name(kSymbols[i].name);
    if (std::find(hidden.begin(), hidden.end(), name) != hidden.end()) continue;
    lib->syms_[i] = dlsym(handle, name.c_str());
  }
  for (size_t i = 0; i < kSymbols.size(); i++) {
    if (kSymbols[i].required && lib->syms_[i] == nullptr) {
      return MakeErrorF(ErrorCode::kNotFound, "{} lacks the required NVML export {}", path, kSymbols[i].name);
    }
  }
  const nvmlReturn_t rc = ITHBAT_NVML_CALL(*lib, NvmlFamily::kSystem, nvmlInit_v2);
  if (rc != NVML_SUCCESS) {
    return MakeErrorF(ErrorCode::kUnavailable, "nvmlInit_v2 failed: {}", lib->ErrorText(rc));
  }
  lib->initialized_ = true;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_) (void)ITHBAT_NVML_CALL(*this, NvmlFamily::kSystem, nvmlShutdown);
  if (handle_ != nullptr) dlclose(handle_);
}

std::vector<std::string> NvmlLibrary::MissingOptional() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < kSymbols.size(); i++) {
    if (!kSymbols[i].required && syms_[i] == nullptr) out.emplace_back(kSymbols[i].name);
  }
  return out;
}

std::string NvmlLibrary::ErrorText(nvmlReturn_t rc) const {
  void* p = syms_[SymbolIndex("nvmlErrorString")];
  if (p != nullptr) {
    const char* s = reinterpret_cast<nvmlErrorString_fn>(p)(rc);
    if (s != nullptr) return fmt::format("{} ({})", s, rc);
  }
  return fmt::format("NVML error {}", rc);
}

Status NvmlLibrary::ToStatus(nvmlReturn_t rc, std::string_view what) const {
  if (rc == NVML_SUCCESS) return Ok();
  ErrorCode code = ErrorCode::kUnavailable;
  switch (rc) {
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_NOT_FOUND:
      code = ErrorCode::kNotFound;
      break;
    case NVML_ERROR_NO_PERMISSION:
      code = ErrorCode::kPermission;
      break;
    case NVML_ERROR_TIMEOUT:
      code = ErrorCode::kTimeout;
      break;
    case NVML_ERROR_INVALID_ARGUMENT:
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      code = ErrorCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return MakeErrorF(code, "{}: {}", what, ErrorText(rc));
}

}  // namespace ithbat::collect
