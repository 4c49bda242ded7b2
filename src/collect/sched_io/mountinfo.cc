#include "collect/sched_io/mountinfo.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>

#include <fcntl.h>
#include <unistd.h>

namespace ithbat::collect::sched_io {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out.push_back(static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Length of the valid UTF-8 sequence at s[i] (1-4), 0 when invalid (overlong forms, surrogates,
// code points over U+10FFFF, truncated sequences); *cp receives the code point.
size_t Utf8Sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  uint32_t v, min;
  if ((c & 0xe0) == 0xc0) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

bool IsControl(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool ParseU32(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string SafeMountLabel(std::string_view raw) {
  constexpr size_t kSuffixBytes = 1 + 16;  // "~" and 16 hex digits
  std::string out;
  out.reserve(std::min(raw.size(), kMaxMountLabelBytes));
  bool changed = false;
  // Bytes of `out` that end on a character boundary within the room left for the suffix.
  size_t cut = 0;
  for (size_t i = 0; i < raw.size();) {
    uint32_t cp = 0;
    size_t n = Utf8Sequence(raw, i, &cp);
    if (n == 0 || IsControl(cp)) {
      out.push_back('?');
      changed = true;
      i += n == 0 ? 1 : n;
    } else {
      out.append(raw.substr(i, n));
      i += n;
    }
    if (out.size() <= kMaxMountLabelBytes - kSuffixBytes) cut = out.size();
    // Past the limit the rest is only hashed: stop copying.
    if (out.size() > kMaxMountLabelBytes) {
      changed = true;
      break;
    }
  }
  if (!changed) return out;
  out.resize(cut);
  char suffix[kSuffixBytes + 1];
  std::snprintf(suffix, sizeof(suffix), "~%016llx", static_cast<unsigned long long>(Fnv1a64(raw)));
  out += suffix;
  return out;
}

std::vector<MountEntry> ParseMountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < kMaxMounts) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::vector<std::string_view> f;
    size_t i = 0;
    while (i < line.size() && f.size() < 64) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i >= line.size()) break;
      size_t j = line.find(' ', i);
      if (j == std::string_view::npos) j = line.size();
      f.push_back(line.substr(i, j - i));
      i = j;
    }
    if (f.size() < 8) continue;
    size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    if (sep + 1 >= f.size()) continue;
    const std::string_view dev = f[2];
    const size_t colon = dev.find(':');
    MountEntry m;
    if (colon == std::string_view::npos || !ParseU32(dev.substr(0, colon), &m.major) ||
        !ParseU32(dev.substr(colon + 1), &m.minor)) {
      continue;
    }
    if (f[3].size() > kMaxMountFieldBytes) continue;
    m.root = Unescape(f[3]);
    m.mount_point = SafeMountLabel(Unescape(f[4]));
    m.fstype = SafeMountLabel(Unescape(f[sep + 1]));
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<MountEntry> ReadMountinfo(const std::filesystem::path& procfs, int32_t pid) {
  const std::string path = (procfs / std::to_string(pid) / "mountinfo").string();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string buf;
  buf.resize(kMaxMountinfoBytes);
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = read(fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  // Cut by the limit (the file may end exactly there; then its last line is complete and
  // ends with a newline, which this keeps): a partial last line would parse as a mount with a
  // cut path or fstype.
  bool more = false;
  if (got == buf.size()) {
    char c;
    ssize_t n;
    while ((n = read(fd, &c, 1)) < 0 && errno == EINTR) {
    }
    more = n > 0;
  }
  close(fd);
  buf.resize(got);
  if (more) {
    const size_t nl = buf.rfind('\n');
    buf.resize(nl == std::string::npos ? 0 : nl + 1);
  }
  return ParseMountinfo(buf);
}

const MountEntry* FindMount(const std::vector<MountEntry>& mounts, uint32_t major, uint32_t minor) {
  const MountEntry* first = nullptr;
  for (const auto& m : mounts) {
    if (m.major != major || m.minor != minor) continue;
    if (m.root == "/") return &m;
    if (!first) first = &m;
  }
  return first;
}

}  // namespace ithbat::collect::sched_io
