#include "collect/serving/listener.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>

#include <unistd.h>

#include <fmt/format.h>

#include "core/file_util.h"

namespace ithbat::collect::serving {
namespace {

constexpr std::string_view kListenState = "0A";  // TCP_LISTEN in the kernel's table

// The next whitespace-separated field of `line` from `at`, or empty.
std::string_view NextField(std::string_view line, size_t& at) {
  while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
  const size_t start = at;
  while (at < line.size() && line[at] != ' ' && line[at] != '\t') ++at;
  return line.substr(start, at - start);
}

}  // namespace

std::vector<uint64_t> ListeningInodes(std::string_view table, uint16_t port) {
  std::vector<uint64_t> inodes;
  while (!table.empty()) {
    const size_t nl = table.find('\n');
    const std::string_view line = table.substr(0, nl);
    table = nl == std::string_view::npos ? std::string_view() : table.substr(nl + 1);
    // "  sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt   uid  timeout inode ..."
    size_t at = 0;
    std::string_view fields[10];
    for (auto& f : fields) f = NextField(line, at);
    if (fields[9].empty() || fields[3] != kListenState) continue;
    const std::string_view local = fields[1];
    const size_t colon = local.rfind(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view port_hex = local.substr(colon + 1);
    unsigned local_port = 0;
    auto [p_end, p_ec] = std::from_chars(port_hex.data(), port_hex.data() + port_hex.size(), local_port, 16);
    if (p_ec != std::errc() || p_end != port_hex.data() + port_hex.size() || local_port != port) continue;
    uint64_t inode = 0;
    auto [i_end, i_ec] = std::from_chars(fields[9].data(), fields[9].data() + fields[9].size(), inode);
    if (i_ec != std::errc() || i_end != fields[9].data() + fields[9].size() || inode == 0) continue;
    inodes.push_back(inode);
  }
  std::sort(inodes.begin(), inodes.end());
  inodes.erase(std::unique(inodes.begin(), inodes.end()), inodes.end());
  return inodes;
}

Result<bool> HoldsListener(const std::filesystem::path& proc_root, int32_t pid, uint16_t port) {
  const std::filesystem::path dir = proc_root / std::to_string(pid);
  std::vector<uint64_t> inodes;
  for (const char* table : {"net/tcp", "net/tcp6"}) {
    auto text = ReadFileBounded(dir / table, kMaxSocketTableBytes);
    if (!text) {
      // A kernel without IPv6 has no tcp6; a pid gone has neither (reported through fd below).
      if (text.error().code == ErrorCode::kNotFound) continue;
      return std::unexpected(text.error());
    }
    std::vector<uint64_t> found = ListeningInodes(*text, port);
    inodes.insert(inodes.end(), found.begin(), found.end());
  }
  if (inodes.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) return MakeErrorF(ErrorCode::kNotFound, "pid {} is gone", pid);
    return false;
  }
  std::sort(inodes.begin(), inodes.end());

  std::error_code ec;
  std::filesystem::directory_iterator it(dir / "fd", ec);
  if (ec) {
    return MakeErrorF(ec == std::errc::no_such_file_or_directory ? ErrorCode::kNotFound
                      : ec == std::errc::permission_denied     ? ErrorCode::kPermission
                                                               : ErrorCode::kIo,
                      "cannot list the descriptors of pid {}: {}", pid, ec.message());
  }
  size_t scanned = 0;
  char target[64];
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;  // the process exited while we looked: what was seen is all there is
    if (++scanned > kMaxDescriptorsScanned) {
      return MakeErrorF(ErrorCode::kResourceExhausted,
                        "pid {} has more than {} descriptors; its listening socket was not among them", pid,
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
