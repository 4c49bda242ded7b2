#include "net/curl_api.h"

#include <string>

#include <dlfcn.h>
#include <fmt/format.h>

namespace ithbat::net {
namespace {

// Debian 12's libcurl4 (OpenSSL); the soname has been libcurl.so.4 since 2006.
constexpr const char* kSoname = "libcurl.so.4";

template <class Fn>
bool Bind(void* lib, const char* soname, const char* name, Fn& fn, std::string& error) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (error.empty()) error = fmt::format("{} has no {} (not libcurl 7.x/8.x)", soname, name);
    return false;
  }
  fn = reinterpret_cast<Fn>(sym);
  return true;
}

// Loaded and initialised once per process (a function-local static: thread-safe).
const Result<CurlApi>& Loaded() {
  static const Result<CurlApi> loaded = []() -> Result<CurlApi> {
    auto api = BindCurl(kSoname);
    if (!api) return api;
    // Process-wide set-up before any handle (curl_easy_init would do it lazily, but not safely
    // from two threads at once on every build).
    if (CURLcode rc = api->global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK) {
      return MakeErrorF(ErrorCode::kUnavailable, "curl_global_init failed (code {})", static_cast<int>(rc));
    }
    return api;
  }();
  return loaded;
}

}  // namespace

Result<CurlApi> BindCurl(const char* soname) {
  // Never unloaded: handles and libcurl's global state live until the process exits.
  void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return MakeErrorF(ErrorCode::kUnavailable, "cannot load {}: {} (install libcurl4)", soname,
                      why ? why : "unknown reason");
  }
  CurlApi a{};
  std::string e;
  const char* so = soname;  // keeps each line below short
  bool ok = Bind(lib, so, "curl_global_init", a.global_init, e);
  ok &= Bind(lib, so, "curl_easy_init", a.easy_init, e);
  ok &= Bind(lib, so, "curl_easy_cleanup", a.easy_cleanup, e);
  ok &= Bind(lib, so, "curl_easy_reset", a.easy_reset, e);
  ok &= Bind(lib, so, "curl_easy_setopt", a.easy_setopt, e);
  ok &= Bind(lib, so, "curl_easy_perform", a.easy_perform, e);
  ok &= Bind(lib, so, "curl_easy_getinfo", a.easy_getinfo, e);
  ok &= Bind(lib, so, "curl_easy_strerror", a.easy_strerror, e);
  ok &= Bind(lib, so, "curl_slist_append", a.slist_append, e);
  ok &= Bind(lib, so, "curl_slist_free_all", a.slist_free_all, e);
  ok &= Bind(lib, so, "curl_version_info", a.version_info, e);
  if (!ok) {
    dlclose(lib);
    return MakeError(ErrorCode::kUnavailable, e);
  }
  return a;
}

Result<const CurlApi*> Curl() {
  const Result<CurlApi>& loaded = Loaded();
  if (!loaded) return std::unexpected(loaded.error());
  return &*loaded;
}

std::string CurlVersion() {
  auto api = Curl();
  if (!api) return fmt::format("not loaded ({})", api.error().message);
  const curl_version_info_data* info = (*api)->version_info(CURLVERSION_NOW);
  return info != nullptr && info->version != nullptr ? std::string(info->version) : "unknown";
}

}  // namespace ithbat::net
