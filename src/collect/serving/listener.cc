#include "collect/serving/listener.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/file_util.h"

namespace ithbat::collect::serving {
namespace {

constexpr int kTcpListen = 10;  // TCP_LISTEN in the kernel's state numbering

// One sock_diag dump of the TCP sockets of `family` in LISTEN state; the inodes of those on
// `port` are added to `out`.
Status DumpListeners(int family, uint16_t port, std::vector<uint64_t>& out) {
  UniqueFd sock(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (sock.get() < 0) return ErrnoError(ErrorCode::kUnavailable, "sock_diag netlink socket", errno);
  timeval tv{2, 0};  // the kernel answers at once; a bound all the same
  setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = 1u << kTcpListen;  // listening only: the kernel skips the connections
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(sock.get(), &message, sizeof(message), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return ErrnoError(ErrorCode::kUnavailable, "sock_diag request", errno);
  }
  alignas(nlmsghdr) char buffer[32 * 1024];
  for (;;) {
    const ssize_t n = recv(sock.get(), buffer, sizeof(buffer), 0);
    if (n < 0) return ErrnoError(ErrorCode::kUnavailable, "sock_diag answer", errno);
    if (n == 0) return MakeError(ErrorCode::kUnavailable, "sock_diag: the kernel closed the dump");
    size_t left = static_cast<size_t>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return Ok();
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        // A kernel without IPv6 refuses the AF_INET6 dump: nothing listens there.
        if (family == AF_INET6 && (e->error == -EAFNOSUPPORT || e->error == -ENOENT)) return Ok();
        return ErrnoError(ErrorCode::kUnavailable, "sock_diag", -e->error);
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(m->id.idiag_sport) != port || m->idiag_state != kTcpListen || m->idiag_inode == 0) continue;
      if (out.size() >= kMaxListeners) {
        return MakeErrorF(ErrorCode::kResourceExhausted, "more than {} sockets listen on port {}", kMaxListeners,
                          port);
      }
      out.push_back(m->idiag_inode);
    }
  }
}

}  // namespace

Result<std::vector<uint64_t>> ListeningInodes(uint16_t port) {
  std::vector<uint64_t> inodes;
  for (int family : {AF_INET, AF_INET6}) {
    if (Status s = DumpListeners(family, port, inodes); !s) return std::unexpected(s.error());
  }
  std::sort(inodes.begin(), inodes.end());
  inodes.erase(std::unique(inodes.begin(), inodes.end()), inodes.end());
  return inodes;
}

Result<bool> HoldsSocket(const std::filesystem::path& proc_root, int32_t pid, const std::vector<uint64_t>& inodes) {
  const std::filesystem::path dir = proc_root / std::to_string(pid) / "fd";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return MakeErrorF(ec == std::errc::no_such_file_or_directory ? ErrorCode::kNotFound
                      : ec == std::errc::permission_denied     ? ErrorCode::kPermission
                                                               : ErrorCode::kIo,
                      "cannot list the descriptors of pid {}: {}", pid, ec.message());
  }
  if (inodes.empty()) return false;
  size_t scanned = 0;
  char target[64];
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;  // the process exited while we looked: what was seen is all there is
    if (++scanned > kMaxDescriptorsScanned) {
      return MakeErrorF(ErrorCode::kResourceExhausted,
                        "pid {} has more than {} descriptors; the listening socket was not among them", pid,
                        kMaxDescriptorsScanned);
    }
    const ssize_t n = readlink(it->path().c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string_view link(target, static_cast<size_t>(n));
    if (!link.starts_with("socket:[") || !link.ends_with("]")) continue;
    const std::string_view digits = link.substr(8, link.size() - 9);
    uint64_t inode = 0;
    auto [end, iec] = std::from_chars(digits.data(), digits.data() + digits.size(), inode);
    if (iec != std::errc() || end != digits.data() + digits.size()) continue;
    if (std::binary_search(inodes.begin(), inodes.end(), inode)) return true;
  }
  return false;
}

}  // namespace ithbat::collect::serving
