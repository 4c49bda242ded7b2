#include "collect/sched_io/mountinfo.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "core/labels.h"
#include "testutil/testutil.h"

namespace ithbat::collect::sched_io {
namespace {

TEST(Mountinfo, ParsesFieldsOptionalTagsAndEscapes) {
  const std::string text =
      "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "42 27 0:39 / /mnt/my\\040ckpt rw,nosuid master:3 shared:7 - fuse.slowfs ithbat-slowfs rw,user_id=0\n"
      "43 27 0:39 /sub /bind rw - fuse.slowfs ithbat-slowfs rw\n"
      "garbage line\n"
      "44 27 x:1 / /bad rw - ext4 /dev/x rw\n"
      "45 27 8:1 / /nofstype rw -\n";
  auto m = ParseMountinfo(text);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].major, 254u);
  EXPECT_EQ(m[0].mount_point, "/");
  EXPECT_EQ(m[0].fstype, "ext4");
  EXPECT_EQ(m[1].mount_point, "/mnt/my ckpt");
  EXPECT_EQ(m[1].fstype, "fuse.slowfs");
  EXPECT_EQ(m[2].root, "/sub");
  // A device mounted twice: the mount of its root wins, whatever the order.
  const MountEntry* f = FindMount(m, 0, 39);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->mount_point, "/mnt/my ckpt");
  EXPECT_EQ(FindMount(m, 9, 9), nullptr);
}

TEST(Mountinfo, BoundsAndMalformedInput) {
  EXPECT_TRUE(ParseMountinfo("").empty());
  EXPECT_TRUE(ParseMountinfo("\n\n\n").empty());
  EXPECT_TRUE(ParseMountinfo(std::string(100000, ' ')).empty());
  std::string many;
  for (size_t i = 0; i < kMaxMounts + 10; ++i) many += "1 1 8:1 / /m rw - ext4 d rw\n";
  EXPECT_EQ(ParseMountinfo(many).size(), kMaxMounts);
  const std::string trailing_backslash = "1 1 8:1 / /m\\ rw - ext4 d rw\n";
  auto m = ParseMountinfo(trailing_backslash);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].mount_point, "/m\\");
}

TEST(Mountinfo, FindsTheMountOfAFileOfThisProcess) {
  struct stat st {};
  ASSERT_EQ(stat("/proc/self/mountinfo", &st), 0);  // on procfs
  auto mounts = ReadMountinfo("/proc", getpid());
  ASSERT_FALSE(mounts.empty());
  const MountEntry* m = FindMount(mounts, major(st.st_dev), minor(st.st_dev));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->fstype, "proc");
  // The kernel encoding of s_dev splits the same way.
  const uint32_t kdev = (major(st.st_dev) << 20) | minor(st.st_dev);
  EXPECT_EQ(KernelDevMajor(kdev), major(st.st_dev));
  EXPECT_EQ(KernelDevMinor(kdev), minor(st.st_dev));
}

// Valid UTF-8, no C0/DEL/C1 control character.
bool SafeForALabel(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) return false;  // C1
    i += n;
  }
  return true;
}

// A container chooses its mount paths: escapes that decode to newlines, other control bytes
// and invalid UTF-8, raw bytes over 0x7f, paths up to the kernel's limit. Every label must be
// exportable (valid UTF-8, no control characters, a size a label value accepts) and distinct
// mounts must keep distinct labels.
TEST(Mountinfo, HostileMountPathsBecomeSafeDistinctLabels) {
  const std::string long_a = "/ckpt/" + std::string(4000, 'a');
  const std::string long_b = "/ckpt/" + std::string(3999, 'a') + "b";
  // Backslash escapes are mountinfo's (the kernel writes \ooo); \x are raw bytes.
  const std::string text =
      "1 1 0:1 / /x\\012injected_metric{a=\"1\"}\\0121 rw - ext4 d rw\n"
      "2 1 0:2 / /x\\011tab rw - ext4 d rw\n"
      "3 1 0:3 / /x\\015cr rw - ext4 d rw\n"
      "4 1 0:4 / /bad\\377\\376utf8 rw - ext4 d rw\n"
      "5 1 0:5 / /raw\xff\xc0\xaf" "bytes rw - ext4 d rw\n"
      "6 1 0:6 / /c1\\302\\205x rw - fuse.e\\033[31m d rw\n"
      "7 1 0:7 / " + long_a + " rw - ext4 d rw\n"
      "8 1 0:8 / " + long_b + " rw - ext4 d rw\n"
      "9 1 0:9 / /donn\xc3\xa9" "es/\xe3\x83\x81\xe3\x82\xa7\xe3\x83\x83\xe3\x82\xaf rw - nfs4 s rw\n"
      "10 1 0:10 / /x\\011cr rw - ext4 d rw\n";
  auto m = ParseMountinfo(text);
  ASSERT_EQ(m.size(), 10u);
  std::set<std::string> labels;
  for (const auto& e : m) {
    EXPECT_TRUE(SafeForALabel(e.mount_point)) << e.mount_point;
    EXPECT_TRUE(SafeForALabel(e.fstype)) << e.fstype;
    EXPECT_LE(e.mount_point.size(), kMaxMountLabelBytes);
    EXPECT_LE(e.fstype.size(), kMaxMountLabelBytes);
    EXPECT_EQ(e.mount_point.find('\n'), std::string::npos);
    labels.insert(e.mount_point);
    // The store takes it as a label value.
    EXPECT_TRUE(LabelSet::From({{"mount", e.mount_point}, {"fstype", e.fstype}}).has_value()) << e.mount_point;
  }
  EXPECT_EQ(labels.size(), m.size()) << "two mounts share a label";
  // Readable where it can be: the part before the first bad byte is kept.
  EXPECT_EQ(m[0].mount_point.rfind("/x?injected_metric", 0), 0u) << m[0].mount_point;
  EXPECT_EQ(m[6].mount_point.rfind("/ckpt/aaaa", 0), 0u);
  EXPECT_EQ(m[5].fstype.rfind("fuse.e?[31m", 0), 0u) << m[5].fstype;
  // Valid UTF-8 without control characters is left alone.
  EXPECT_EQ(m[8].mount_point, "/donn\xc3\xa9" "es/\xe3\x83\x81\xe3\x82\xa7\xe3\x83\x83\xe3\x82\xaf");
  EXPECT_EQ(m[8].fstype, "nfs4");
  // The same input always gives the same label (a device keeps its label across reads).
  EXPECT_EQ(ParseMountinfo(text)[6].mount_point, m[6].mount_point);
  // Cutting never splits a character.
  const std::string wide = "/" + std::string(100, 'x') + std::string(200, '\0');
  std::string multibyte = "/";
  for (int i = 0; i < 200; ++i) multibyte += "\xe3\x83\x81";
  EXPECT_TRUE(SafeForALabel(SafeMountLabel(multibyte)));
  EXPECT_LE(SafeMountLabel(multibyte).size(), kMaxMountLabelBytes);
  EXPECT_TRUE(SafeForALabel(SafeMountLabel(wide)));
  EXPECT_EQ(SafeMountLabel(""), "");
  EXPECT_EQ(SafeMountLabel(std::string(kMaxMountLabelBytes, 'a')), std::string(kMaxMountLabelBytes, 'a'));
  EXPECT_NE(SafeMountLabel(std::string(kMaxMountLabelBytes + 1, 'a')), SafeMountLabel(std::string(kMaxMountLabelBytes + 2, 'a')));
}

// A mountinfo longer than the read limit: the line the limit cuts is dropped, not parsed as a
// mount with a cut fstype or path.
TEST(Mountinfo, ReadDropsTheLineTheLimitCuts) {
  ithbat::testing::TempDir proc;
  const int32_t pid = 4242;
  std::filesystem::create_directories(proc.path() / std::to_string(pid));
  std::string text;
  const std::string filler_path = "/" + std::string(1000, 'p');
  for (uint32_t i = 0; text.size() < kMaxMountinfoBytes - 2000; ++i) {
    text += std::to_string(i) + " 1 8:" + std::to_string(i % 1000) + " / " + filler_path + " rw - ext4 d rw\n";
  }
  // The last line: the limit falls inside its fstype, where the cut part would still parse.
  const std::string head = "99999 1 9:99 / /last rw - ";
  text += std::string(kMaxMountinfoBytes - text.size() - head.size() - 2, ' ');  // leading spaces are skipped
  text += head + "ext4 d rw\n";
  ASSERT_GT(text.size(), kMaxMountinfoBytes);
  ASSERT_EQ(text.substr(kMaxMountinfoBytes - 2 - head.size(), head.size()), head);
  {
    std::ofstream out(proc.path() / std::to_string(pid) / "mountinfo", std::ios::binary);
    out << text;
  }
  auto mounts = ReadMountinfo(proc.path(), pid);
  ASSERT_FALSE(mounts.empty());
  EXPECT_EQ(FindMount(mounts, 9, 99), nullptr) << "the cut line was parsed";
  EXPECT_NE(FindMount(mounts, 8, 0), nullptr);
  // The same file within the limit: the line is there, whole.
  text.erase(0, text.find('\n') + 1);
  {
    std::ofstream out(proc.path() / std::to_string(pid) / "mountinfo", std::ios::binary | std::ios::trunc);
    out << text;
  }
  ASSERT_LE(text.size(), kMaxMountinfoBytes);
  mounts = ReadMountinfo(proc.path(), pid);
  const MountEntry* last = FindMount(mounts, 9, 99);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->fstype, "ext4");
}

}  // namespace
}  // namespace ithbat::collect::sched_io
