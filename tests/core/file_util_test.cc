#include "core/file_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testutil/testutil.h"

namespace ithbat {
namespace {

using ::ithbat::testing::TempDir;

TEST(ReadFileBoundedTest, ReadsWholeFile) {
  TempDir dir;
  const std::string content = "line one\nline two\n";
  dir.WriteFile("f", content);
  auto r = ReadFileBounded(dir.path() / "f", 1024);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, content);
}

TEST(ReadFileBoundedTest, EmptyFile) {
  TempDir dir;
  dir.WriteFile("f", "");
  auto r = ReadFileBounded(dir.path() / "f", 16);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, "");
}

TEST(ReadFileBoundedTest, ExactlyTheBoundIsAccepted) {
  TempDir dir;
  dir.WriteFile("f", std::string(100, 'x'));
  auto r = ReadFileBounded(dir.path() / "f", 100);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->size(), 100u);
}

TEST(ReadFileBoundedTest, OneByteOverTheBoundIsRefused) {
  TempDir dir;
  dir.WriteFile("f", std::string(101, 'x'));
  auto r = ReadFileBounded(dir.path() / "f", 100);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(r.error().message.find((dir.path() / "f").string()), std::string::npos) << r.error().message;
}

TEST(ReadFileBoundedTest, LargerThanChunkReadsCompletely) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 20000; i++) content += std::to_string(i) + "\n";  // ~110 KiB, several reads
  dir.WriteFile("f", content);
  auto r = ReadFileBounded(dir.path() / "f", 1 << 20);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(*r, content);
}

TEST(ReadFileBoundedTest, ProcFileWithSizeZeroIsBoundedByReading) {
  // /proc files report st_size 0: only reading past the bound can catch them.
  struct stat st {};
  ASSERT_EQ(stat("/proc/self/status", &st), 0);
  ASSERT_EQ(st.st_size, 0);
  auto small = ReadFileBounded("/proc/self/status", 10);
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().code, ErrorCode::kResourceExhausted);
  auto whole = ReadFileBounded("/proc/self/status", 1 << 20);
  ASSERT_TRUE(whole) << whole.error().ToString();
  EXPECT_NE(whole->find("Pid:"), std::string::npos);
}

TEST(ReadFileBoundedTest, MissingFileIsNotFound) {
  TempDir dir;
  auto r = ReadFileBounded(dir.path() / "nope", 16);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find("nope"), std::string::npos);
  // A file under a path component that is a regular file: ENOTDIR, also "not found".
  dir.WriteFile("plain", "x");
  auto r2 = ReadFileBounded(dir.path() / "plain" / "child", 16);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, ErrorCode::kNotFound);
}

TEST(ReadFileBoundedTest, DirectoryIsRefused) {
  TempDir dir;
  auto r = ReadFileBounded(dir.path(), 16);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

TEST(ReadFileBoundedTest, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = ReadFileBounded(fifo, 16);  // would block forever without O_NONBLOCK + the type check
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

TEST(ReadFileBoundedTest, UnreadableFileIsPermission) {
  TempDir dir;
  dir.WriteFile("secret", "x");
  const auto secret = dir.path() / "secret";
  ASSERT_EQ(chmod(secret.c_str(), 0), 0);
  if (geteuid() != 0) {
    auto r = ReadFileBounded(secret, 16);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kPermission);
    return;
  }
  // Root reads a mode-000 file: check from a child that drops to nobody (65534).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    auto r = ReadFileBounded(secret, 16);
    _exit(r ? 1 : (r.error().code == ErrorCode::kPermission ? 0 : 2));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  // Tests run as root (CI does): dropping to nobody must work, or the check would be a hole.
  ASSERT_NE(WEXITSTATUS(status), 3) << "cannot drop to uid 65534 here (run the tests as root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: read succeeded, 2: another error code";
}

TEST(ReadFileBoundedTest, IntoReusesTheBuffer) {
  TempDir dir;
  dir.WriteFile("a", std::string(5000, 'a'));
  dir.WriteFile("b", "bb");
  std::string buf;
  ASSERT_TRUE(ReadFileBoundedInto(dir.path() / "a", 1 << 20, &buf));
  EXPECT_EQ(buf, std::string(5000, 'a'));
  const size_t cap = buf.capacity();
  ASSERT_TRUE(ReadFileBoundedInto(dir.path() / "b", 1 << 20, &buf));
  EXPECT_EQ(buf, "bb");
  EXPECT_EQ(buf.capacity(), cap);
}

TEST(QuoteForErrorTest, EscapesAndCuts) {
  EXPECT_EQ(QuoteForError("abc 12"), "abc 12");
  EXPECT_EQ(QuoteForError(std::string_view("a\0b\n\xff\\", 6)), "a\\x00b\\x0a\\xff\\x5c");
  const std::string long_text(100, 'z');
  EXPECT_EQ(QuoteForError(long_text), std::string(64, 'z') + "...");
}

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  LineReader r(text);
  std::string_view line;
  while (r.Next(&line)) out.emplace_back(line);
  return out;
}

TEST(LineReaderTest, SplitsLines) {
  EXPECT_EQ(Lines(""), std::vector<std::string>{});
  EXPECT_EQ(Lines("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(Lines("a\n"), std::vector<std::string>{"a"});
  EXPECT_EQ(Lines("a\n\nb"), (std::vector<std::string>{"a", "", "b"}));
  LineReader r("x\ny\n");
  std::string_view line;
  EXPECT_EQ(r.line_number(), 0u);
  ASSERT_TRUE(r.Next(&line));
  ASSERT_TRUE(r.Next(&line));
  EXPECT_EQ(line, "y");
  EXPECT_EQ(r.line_number(), 2u);
  EXPECT_FALSE(r.Next(&line));
}

TEST(FieldReaderTest, SplitsOnBlanks) {
  FieldReader r("  cpu0\t 12  34 \t");
  std::string_view f;
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f, "cpu0");
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f, "12");
  EXPECT_EQ(r.Rest(), "34 \t");
  ASSERT_TRUE(r.Next(&f));
  EXPECT_EQ(f, "34");
  EXPECT_FALSE(r.Next(&f));
  EXPECT_EQ(r.Rest(), "");
  FieldReader empty(" \t ");
  EXPECT_FALSE(empty.Next(&f));
}

TEST(ParseNumberTest, Uint64) {
  EXPECT_EQ(ParseUint64("0").value(), 0u);
  EXPECT_EQ(ParseUint64("18446744073709551615").value(), UINT64_MAX);
  for (std::string_view bad : {"", "-1", "+1", " 1", "1 ", "1.5", "0x10", "18446744073709551616", "abc"}) {
    auto r = ParseUint64(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kParse);
    EXPECT_NE(r.error().message.find(fmt::format("'{}'", bad)), std::string::npos) << r.error().message;
  }
}

TEST(ParseNumberTest, Int64) {
  EXPECT_EQ(ParseInt64("-42").value(), -42);
  EXPECT_EQ(ParseInt64("9223372036854775807").value(), INT64_MAX);
  EXPECT_FALSE(ParseInt64("9223372036854775808"));
  EXPECT_FALSE(ParseInt64("4x"));
}

TEST(ParseNumberTest, Double) {
  EXPECT_DOUBLE_EQ(ParseDouble("1.88").value(), 1.88);
  EXPECT_DOUBLE_EQ(ParseDouble("-0.5").value(), -0.5);
  EXPECT_DOUBLE_EQ(ParseDouble("1e3").value(), 1000.0);
  for (std::string_view bad : {"", "nan", "inf", "-inf", "1e400", "1.5x", " 1", "1,5"}) {
    EXPECT_FALSE(ParseDouble(bad)) << bad;
  }
  // The quoted text is cut so a huge garbage token cannot make a huge message.
  auto r = ParseDouble(std::string(1000, 'q'));
  ASSERT_FALSE(r);
  EXPECT_LT(r.error().message.size(), 140u);
  EXPECT_NE(r.error().message.find("..."), std::string::npos);
}

}  // namespace
}  // namespace ithbat
