#include "net/curl_api.h"

#include <gtest/gtest.h>

#include "net/http_client.h"

namespace ithbat::net {
namespace {

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
  ASSERT_FALSE(api);
  EXPECT_EQ(api.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(api.error().message.find("cannot load libcurl-ithbat-absent.so.4"), std::string::npos)
      << api.error().message;
  EXPECT_NE(api.error().message.find("install libcurl4"), std::string::npos);
}

TEST(CurlApi, ALibraryThatIsNotLibcurlIsRefusedByName) {
  auto api = BindCurl("libc.so.6");
  ASSERT_FALSE(api);
  EXPECT_EQ(api.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(api.error().message.find("libc.so.6 has no curl_global_init"), std::string::npos)
      << api.error().message;
}

}  // namespace
}  // namespace ithbat::net
