#include "net/curl_api.h"

#include <gtest/gtest.h>

#include "net/http_client.h"

namespace ithbat::net {
namespace {

// A refused library is kUnavailable and its message says `what`.
void ExpectRefused(const Result<CurlApi>& api, const std::string& what) {
  ASSERT_FALSE(api);
  EXPECT_EQ(api.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(api.error().message.find(what), std::string::npos) << api.error().message;
}

TEST(CurlApi, LoadsLibcurlAtFirstUse) {
  auto api = Curl();
  ASSERT_TRUE(api) << api.error().message;
  const curl_version_info_data* info = (*api)->version_info(CURLVERSION_NOW);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(CurlVersion(), info->version);
  // Debian 12's libcurl4 is built with OpenSSL: the webhook's https:// depends on it.
  EXPECT_TRUE(HttpsSupported());
}

TEST(CurlApi, AMissingLibraryIsNamedWithTheLoadersReason) {
  auto api = BindCurl("libcurl-ithbat-absent.so.4");
  ExpectRefused(api, "cannot load libcurl-ithbat-absent.so.4");
  ExpectRefused(api, "install libcurl4");
}

TEST(CurlApi, ALibraryThatIsNotLibcurlIsRefusedByName) {
  ExpectRefused(BindCurl("libc.so.6"), "libc.so.6 has no curl_global_init");
}

}  // namespace
}  // namespace ithbat::net
