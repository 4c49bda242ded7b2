#include "cli/version_info.h"

#include <CLI/Version.hpp>
#include <fmt/core.h>
#include <microhttpd.h>
#include <nlohmann/json.hpp>
#include <spdlog/version.h>
#include <zstd.h>

#include "core/version.h"
#include "net/curl_api.h"

#ifndef ITHBAT_BUILD_TYPE
#define ITHBAT_BUILD_TYPE "unknown"
#endif

namespace ithbat::cli {

std::string VersionText() {
  std::string out = fmt::format("ithbat {}\n", kVersion);
  // g++ 12 reports C++23 as 202100 (the value before the standard was final).
  const char* standard = __cplusplus > 202002L ? "C++23" : "C++20";
  out += fmt::format("  build:     {}, {}, {}\n", ITHBAT_BUILD_TYPE, kCompiler, standard);
  out += fmt::format(
      "  libraries: fmt {}.{}.{}, spdlog {}.{}.{}, CLI11 {}, libmicrohttpd {}, libcurl {}, nlohmann-json "
      "{}.{}.{}, "
      "zstd {}\n",
      FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100, SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR,
      SPDLOG_VER_PATCH, CLI11_VERSION, MHD_get_version(), net::CurlVersion(), NLOHMANN_JSON_VERSION_MAJOR,
      NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH, ZSTD_versionString());
  return out;
}

}  // namespace ithbat::cli
