#pragma once
// libcurl, loaded when the first request is made rather than when the agent starts.
//
// Why: libcurl with its TLS, Kerberos, LDAP and SSH dependencies is ~3.3 MiB of the agent's RSS
// (relocated data and touched text of 20 libraries, docs/performance.md) on a node that makes no
// outgoing request: only the serving collector (when a local inference server is found), the
// webhook, the hub's pulls and `ithbat record` ever call out. The types come from libcurl's own
// header, so the calls below are libcurl's ABI, checked by the compiler; only the binding is late.
// The package and the image name libcurl4 explicitly (packaging/package.cmake,
// scripts/build-image.sh), since the binary's DT_NEEDED no longer does.
#include <curl/curl.h>

#include "core/result.h"

namespace ithbat::net {

struct CurlApi {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
  curl_version_info_data* (*version_info)(CURLversion);
};

// libcurl.so.4, loaded and initialised (curl_global_init) once per process, thread-safe. The
// error (kUnavailable) names the library and dlerror()'s reason, and is the same on every call:
// a node without libcurl runs on with its outgoing requests failing, saying why.
Result<const CurlApi*> Curl();

// "7.88.1", or "not loaded (…)" when libcurl cannot be loaded. Loads it.
std::string CurlVersion();

// What Curl() does once, from a given library, uncached (for tests of a missing or wrong
// library): the bound functions, or kUnavailable naming the library and what failed. Does not
// call curl_global_init.
Result<CurlApi> BindCurl(const char* soname);

}  // namespace ithbat::net
