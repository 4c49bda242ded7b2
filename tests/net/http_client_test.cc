// The bounded HTTP client against scripted peers on loopback, most of them hostile: each answer
// must be bounded before it is held (headers, body, time), never decoded, never redirected.
#include "net/http_client.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testutil/testutil.h"

namespace ithbat::net {
namespace {

using ::ithbat::testing::ResidentKiB;
using ::ithbat::testing::SendAll;

using ::testing::HasSubstr;

// Reads one request (headers, and a Content-Length body); returns it, or empty at EOF.
std::string ReadRequest(int fd) {
  std::string in;
  char buf[4096];
  size_t end = std::string::npos;
  while ((end = in.find("\r\n\r\n")) == std::string::npos) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return {};
    in.append(buf, static_cast<size_t>(n));
  }
  size_t length = 0;
  if (auto at = in.find("Content-Length: "); at != std::string::npos) length = std::stoul(in.substr(at + 16));
  while (in.size() < end + 4 + length) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

// A loopback peer that runs `script` on each connection it accepts (one at a time).
class ScriptedPeer {
 public:
  using Script = std::function<void(int fd, ScriptedPeer& peer)>;
  explicit ScriptedPeer(Script script) : script_(std::move(script)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int fd = accept(listen_fd_, nullptr, nullptr);
        if (fd < 0 || stopping_) {
          if (fd >= 0) close(fd);
          return;
        }
        connections_++;
        script_(fd, *this);
        close(fd);
      }
    });
  }
  ~ScriptedPeer() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    thread_.join();
  }
  std::string Url(std::string_view path = "/") const { return fmt::format("http://127.0.0.1:{}{}", port_, path); }
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::atomic<size_t> sent_{0};
  std::atomic<bool> stopping_{false};
  std::string last_request;

 private:
  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A script answering every request on the connection with `answer` (keep-alive).
ScriptedPeer::Script Answer(std::string answer) {
  return [answer](int fd, ScriptedPeer& peer) {
    for (;;) {
      std::string request = ReadRequest(fd);
      if (request.empty()) return;
      peer.last_request = request;
      peer.requests_++;
      if (!SendAll(fd, answer)) return;
    }
  };
}

// A script that sends `head` and then `chunk` again and again until the client stops taking it.
ScriptedPeer::Script Flood(std::string head, std::string chunk, size_t limit = size_t{300} << 20) {
  return [head, chunk, limit](int fd, ScriptedPeer& peer) {
    if (ReadRequest(fd).empty()) return;
    peer.requests_++;
    if (!SendAll(fd, head)) return;
    size_t sent = 0;
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    while (sent < limit && !peer.stopping_) {
      ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    peer.sent_ = sent;
  };
}

HttpLimits Small() {
  HttpLimits l;
  l.connect_timeout = 2 * kNsPerSec;
  l.deadline = 5 * kNsPerSec;
  l.max_header_bytes = 16 * 1024;
  l.max_headers = 64;
  l.max_body_bytes = 1024 * 1024;
  return l;
}

TEST(HttpClient, AnOrdinaryAnswerOnOneKeptConnection) {
  ScriptedPeer peer(Answer("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"));
  HttpClient client(Small());
  for (int i = 0; i < 3; ++i) {
    auto a = client.Send({.url = peer.Url("/metrics?x=1")});
    ASSERT_TRUE(a.has_value()) << a.error().ToString();
    EXPECT_EQ(a->status, 200);
    EXPECT_EQ(a->body, "hello");
    EXPECT_EQ(a->content_type, "text/plain");
    EXPECT_FALSE(a->cut);
  }
  EXPECT_EQ(peer.requests_.load(), 3);
  EXPECT_EQ(peer.connections_.load(), 1);  // kept alive
  EXPECT_THAT(peer.last_request, HasSubstr("GET /metrics?x=1 HTTP/1.1"));
  // Nothing asks for a compressed answer.
  EXPECT_THAT(peer.last_request, ::testing::Not(HasSubstr("Accept-Encoding")));
}

TEST(HttpClient, AHugeHeaderLineIsCutOff) {
  ScriptedPeer peer(Flood("HTTP/1.1 200 OK\r\nX-Huge: ", std::string(64 * 1024, 'a')));
  HttpClient client(Small());
  const long before = ResidentKiB();
  auto a = client.Send({.url = peer.Url()});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kResourceExhausted) << a.error().ToString();
  EXPECT_THAT(a.error().message, HasSubstr("header line")) << a.error().ToString();
  EXPECT_LT(ResidentKiB() - before, 32 * 1024);
}

TEST(HttpClient, AHundredThousandHeadersAreCutOff) {
  std::string many = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 100'000; ++i) many += fmt::format("X-{}: v\r\n", i);
  ScriptedPeer peer(Flood(many, "\r\n", 2));
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(a.error().message, HasSubstr("headers"));
}

TEST(HttpClient, AnEndlessBodyIsCutOffOrKeptCut) {
  const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 60000, std::string(60000, 'b'));
  {
    ScriptedPeer peer(Flood("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", chunk));
    HttpClient client(Small());
    const long before = ResidentKiB();
    auto a = client.Send({.url = peer.Url()});
    ASSERT_FALSE(a.has_value());
    EXPECT_EQ(a.error().code, ErrorCode::kResourceExhausted);
    EXPECT_LT(ResidentKiB() - before, 32 * 1024);
  }
  {
    ScriptedPeer peer(Flood("HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n", chunk));
    HttpClient client(Small());
    HttpCall call{.url = peer.Url()};
    call.keep_cut_body = true;
    auto a = client.Send(call);
    ASSERT_TRUE(a.has_value()) << a.error().ToString();
    EXPECT_EQ(a->status, 202);
    EXPECT_TRUE(a->cut);
    EXPECT_EQ(a->body.size(), Small().max_body_bytes);
  }
}

TEST(HttpClient, ADeclaredLengthOverTheLimitIsRefusedUnread) {
  ScriptedPeer peer(Flood("HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n", std::string(64 * 1024, 'c')));
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kResourceExhausted);
}

TEST(HttpClient, ACompressedBodyIsNeverInflated) {
  // Bytes labelled gzip (a bomb would be such a body): the client must hand them back as sent,
  // never inflate them.
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xed\xc1\x01\x0d\x00\x00\x00\xc2\xa0\xf7\x4f\x6d"
                       "\x0e\x37\xa0\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\xab\x01",
                       39);
  ScriptedPeer peer(Answer(fmt::format("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{}",
                                       gz.size(), gz)));
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  ASSERT_TRUE(a.has_value()) << a.error().ToString();
  EXPECT_EQ(a->body, gz);
}

TEST(HttpClient, ASlowDripEndsAtTheDeadline) {
  ScriptedPeer peer([](int fd, ScriptedPeer& p) {
    if (ReadRequest(fd).empty()) return;
    SendAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n");
    while (!p.stopping_ && SendAll(fd, "x")) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  HttpLimits limits = Small();
  limits.deadline = 1 * kNsPerSec;
  HttpClient client(limits);
  auto a = client.Send({.url = peer.Url()});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kTimeout) << a.error().ToString();
}

TEST(HttpClient, ARedirectIsAnAnswerNotFollowed) {
  ScriptedPeer peer(Answer("HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/\r\nContent-Length: 0\r\n\r\n"));
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  ASSERT_TRUE(a.has_value()) << a.error().ToString();
  EXPECT_EQ(a->status, 302);
  EXPECT_EQ(peer.requests_.load(), 1);
}

TEST(HttpClient, OnlyHttpAndHttps) {
  HttpClient client(Small());
  for (std::string url : {"file:///etc/shadow", "gopher://127.0.0.1/", "ftp://127.0.0.1/", "dict://x", ""}) {
    auto a = client.Send({.url = url});
    ASSERT_FALSE(a.has_value()) << url;
    EXPECT_EQ(a.error().code, ErrorCode::kInvalidArgument) << url;
  }
  auto put = client.Send({.method = "PUT", .url = "http://127.0.0.1:1/"});
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::kInvalidArgument);
}

TEST(HttpClient, NoPeerIsUnavailable) {
  HttpClient client(Small());
  auto a = client.Send({.url = "http://127.0.0.1:1/"});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kUnavailable) << a.error().ToString();
}

TEST(HttpClient, TheEnvironmentsProxyIsIgnored) {
  ScriptedPeer peer(Answer("HTTP/1.1 204 No Content\r\n\r\n"));
  setenv("http_proxy", "http://127.0.0.1:1", 1);
  setenv("HTTP_PROXY", "http://127.0.0.1:1", 1);
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  unsetenv("http_proxy");
  unsetenv("HTTP_PROXY");
  ASSERT_TRUE(a.has_value()) << a.error().ToString();
  EXPECT_EQ(a->status, 204);
}

TEST(HttpClient, PostSendsTheBodyAndReadsRetryAfter) {
  ScriptedPeer peer(Answer("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n"));
  HttpClient client(Small());
  HttpCall call{.method = "POST", .url = peer.Url("/hook"), .headers = {{"Content-Type", "application/json"}},
                .body = R"({"text":"hi"})"};
  auto a = client.Send(call);
  ASSERT_TRUE(a.has_value()) << a.error().ToString();
  EXPECT_EQ(a->status, 429);
  EXPECT_EQ(a->retry_after, "7");
  EXPECT_THAT(peer.last_request, HasSubstr("POST /hook HTTP/1.1"));
  EXPECT_THAT(peer.last_request, HasSubstr("Content-Type: application/json"));
  EXPECT_THAT(peer.last_request, HasSubstr(R"({"text":"hi"})"));
}

TEST(HttpClient, NotHttpIsAnIoError) {
  ScriptedPeer peer([](int fd, ScriptedPeer&) {
    ReadRequest(fd);
    SendAll(fd, "SSH-2.0-OpenSSH_9.2\r\n");
  });
  HttpClient client(Small());
  auto a = client.Send({.url = peer.Url()});
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kIo) << a.error().ToString();
}

TEST(QueryString, EncodesAllButUnreserved) {
  EXPECT_EQ(QueryString(std::vector<std::pair<std::string, std::string>>{{"match", R"({job="a b"})"}, {"x", "1~_.-"}}),
            "match=%7Bjob%3D%22a%20b%22%7D&x=1~_.-");
  EXPECT_EQ(QueryString(std::multimap<std::string, std::string>{}), "");
  EXPECT_EQ(HttpOrigin("::1", 9479), "http://[::1]:9479");
  EXPECT_EQ(HttpOrigin("127.0.0.1", 80, true), "https://127.0.0.1:80");
}

}  // namespace
}  // namespace ithbat::net
