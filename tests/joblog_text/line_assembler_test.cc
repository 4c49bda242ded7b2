#include "collect/joblog/text/line_assembler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collect/joblog/text/redact.h"

namespace ithbat::collect::joblog {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Texts(const std::vector<AssembledLine>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) out.push_back(l.text);
  return out;
}

TEST(LineAssemblerTest, LineSpanningWritesGetsTheTimeOfTheCompletingWrite) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("{'loss': 2.3", 10, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(a.pending_bytes(), 12u);
  a.Feed("4, 'epoch': 0.1}\nnext", 20, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "{'loss': 2.34, 'epoch': 0.1}");
  EXPECT_EQ(out[0].time, 20);
  EXPECT_FALSE(out[0].progress);
  EXPECT_FALSE(out[0].truncated);
  a.Feed(" line\n", 30, out);
  EXPECT_THAT(Texts(out), ElementsAre("{'loss': 2.34, 'epoch': 0.1}", "next line"));
  EXPECT_EQ(a.lines(), 2u);
}

TEST(LineAssemblerTest, ManyLinesInOneBlockAndEmptyLines) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("a\nbb\n\nccc\n", 5, out);
  EXPECT_THAT(Texts(out), ElementsAre("a", "bb", "", "ccc"));
}

TEST(LineAssemblerTest, CrLfIsAnOrdinaryLineEvenWhenSplitAcrossWrites) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("one\r\ntwo\r", 1, out);
  ASSERT_EQ(out.size(), 1u);  // "two" waits: the \n may follow
  a.Feed("\nthree\r\r\n", 2, out);
  EXPECT_THAT(Texts(out), ElementsAre("one", "two", "three"));
  for (const auto& l : out) EXPECT_FALSE(l.progress) << l.text;
}

TEST(LineAssemblerTest, TqdmCarriageReturnSegmentsAreProgress) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  // tqdm starts each refresh with \r and ends the bar with \n on close.
  a.Feed("\r  0%|          | 0/100 [00:00<?, ?it/s]", 1, out);
  a.Feed("\r 50%|#####     | 50/100 [00:05<00:05, 10.0it/s]", 2, out);
  a.Feed("\r100%|##########| 100/100 [00:10<00:00, 10.0it/s]\n", 3, out);
  a.Feed("{'train_runtime': 10.1}\n", 4, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].text, "  0%|          | 0/100 [00:00<?, ?it/s]");
  EXPECT_TRUE(out[0].progress);
  EXPECT_EQ(out[0].time, 2);  // completed by the \r that started the next refresh
  EXPECT_EQ(out[1].text, " 50%|#####     | 50/100 [00:05<00:05, 10.0it/s]");
  EXPECT_TRUE(out[1].progress);
  EXPECT_EQ(out[2].text, "100%|##########| 100/100 [00:10<00:00, 10.0it/s]");
  EXPECT_FALSE(out[2].progress);
  EXPECT_EQ(out[3].text, "{'train_runtime': 10.1}");
}

TEST(LineAssemblerTest, TrailingCarriageReturnSegmentIsEmittedWhenTheNextByteComes) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("Epoch 1:  10%|#   | 10/100\r", 1, out);
  EXPECT_TRUE(out.empty());
  a.Feed("Epoch 1:  20%|##  | 20/100\r", 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "Epoch 1:  10%|#   | 10/100");
  EXPECT_TRUE(out[0].progress);
  EXPECT_EQ(out[0].time, 1);
  a.Flush(3, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text, "Epoch 1:  20%|##  | 20/100");
  EXPECT_TRUE(out[1].progress);
  EXPECT_EQ(out[1].time, 2);
}

TEST(LineAssemblerTest, AnsiEscapesAreRemovedAlsoWhenSplitAcrossWrites) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("\x1b[32mINFO\x1b[0m step 1\n", 1, out);
  a.Feed("\x1b[1", 2, out);
  a.Feed(";31", 3, out);
  a.Feed("mERROR\x1b", 4, out);
  a.Feed("[0m done\n", 5, out);
  // OSC hyperlink with BEL and with ESC \ terminators, a two-byte escape, a charset escape.
  a.Feed("\x1b]8;;http://x\x07link\x1b]8;;\x1b\\ ok\x1b" "7\x1b(Bz\n", 6, out);
  EXPECT_THAT(Texts(out), ElementsAre("INFO step 1", "ERROR done", "link okz"));
}

TEST(LineAssemblerTest, ControlBytesOtherThanTabAreRemoved) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed(std::string("a\tb\x07" "c\x08" "d\0e\x7f" "f\n", 12), 1, out);
  EXPECT_THAT(Texts(out), ElementsAre("a\tbcdef"));
}

TEST(LineAssemblerTest, UnterminatedEscapeDoesNotSwallowTheLine) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("before \x1b[12;34\nafter\n", 1, out);  // CSI cut by a newline
  a.Feed("x \x1b]title with no end\nnext\n", 2, out);
  EXPECT_THAT(Texts(out), ElementsAre("before ", "after", "x ", "next"));
}

TEST(LineAssemblerTest, OneMegabyteLineIsCutAtTheBoundAndCounted) {
  constexpr size_t kBound = 16 * 1024;
  LineAssembler a(kBound);
  std::vector<AssembledLine> out;
  const std::string block(8192, 'x');
  size_t fed = 0;
  for (int k = 0; k < 128; ++k) {  // 1 MiB without a newline, in 8 KiB writes
    a.Feed(block, k, out);
    fed += block.size();
    EXPECT_LE(a.pending_bytes(), kBound);
  }
  ASSERT_EQ(out.size(), 1u);  // emitted when it outgrew the bound, not at its end
  // One unfinished word without delimiters: it loses its last kMaxOpenWordBytes (redact.h).
  EXPECT_EQ(out[0].text.size(), kBound - kMaxOpenWordBytes);
  EXPECT_TRUE(out[0].truncated);
  a.Feed("tail\nnext line\n", 200, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text, "next line");
  EXPECT_FALSE(out[1].truncated);
  EXPECT_EQ(a.truncated_lines(), 1u);
  EXPECT_EQ(a.dropped_bytes(), fed + 4 - (kBound - kMaxOpenWordBytes));
}

TEST(LineAssemblerTest, LineOfExactlyTheBoundIsNotTruncated) {
  LineAssembler a(8);
  std::vector<AssembledLine> out;
  a.Feed("12345678\n123456789\n", 1, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "12345678");
  EXPECT_FALSE(out[0].truncated);
  // Cut inside its only word: the unfinished word is dropped, the line says it was cut.
  EXPECT_EQ(out[1].text, "");
  EXPECT_TRUE(out[1].truncated);
  EXPECT_EQ(a.dropped_bytes(), 9u);
}

TEST(LineAssemblerTest, BinaryGarbageStaysBoundedAndPrintable) {
  LineAssembler a(4096);
  std::vector<AssembledLine> out;
  uint32_t x = 12345;
  std::string junk;
  for (int k = 0; k < 1 << 20; ++k) {
    x = x * 1103515245 + 12345;
    junk.push_back(static_cast<char>(x >> 16));
  }
  for (size_t off = 0; off < junk.size(); off += 3000) a.Feed(std::string_view(junk).substr(off, 3000), 1, out);
  a.Flush(2, out);
  EXPECT_LE(a.pending_bytes(), 4096u);
  EXPECT_FALSE(out.empty());
  for (const auto& l : out) {
    EXPECT_LE(l.text.size(), 4096u);
    for (unsigned char c : l.text) ASSERT_TRUE(c == '\t' || (c >= 0x20 && c != 0x7f)) << int(c);
  }
}

TEST(LineAssemblerTest, FlushEmitsThePartialLineOnce) {
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("no newline at exit", 1, out);
  a.Flush(9, out);
  a.Flush(10, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "no newline at exit");
  EXPECT_EQ(out[0].time, 9);
  EXPECT_FALSE(out[0].progress);
  EXPECT_EQ(a.pending_bytes(), 0u);
  // After a flush inside an escape sequence the next write starts clean.
  a.Feed("x\x1b[3", 11, out);
  a.Flush(12, out);
  a.Feed("1mred\n", 13, out);
  EXPECT_THAT(Texts(out), ElementsAre("no newline at exit", "x", "1mred"));
}


TEST(LineAssemblerTest, ACutNeverKeepsHalfAToken) {
  // The bound falls inside a token: the kept line ends before it, so redaction (which needs
  // the whole token) never sees a recognisable-but-cut secret. The dropped bytes are counted.
  LineAssembler a(24);
  std::vector<AssembledLine> out;
  a.Feed("using token hf_AbCdEfGhIjKlMnOpQrStUv now\n", 1, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "using token ");
  EXPECT_TRUE(out[0].truncated);
  EXPECT_EQ(a.dropped_bytes(), std::string("hf_AbCdEfGhIjKlMnOpQrStUv now").size());
}

TEST(LineAssemblerTest, ACutNeverKeepsHalfAUrlPassword) {
  // Token characters alone would stop at '$': the unfinished word goes whole.
  LineAssembler a(36);
  std::vector<AssembledLine> out;
  a.Feed("connect to postgres://admin:pa$$w0rd!@db:5432/x failed\n", 1, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "connect to ");
  EXPECT_TRUE(out[0].truncated);
}

TEST(LineAssemblerTest, CutEmitsThePendingLineAsCut) {
  // Bytes after the pending text were lost: its last word may be half a secret.
  LineAssembler a;
  std::vector<AssembledLine> out;
  a.Feed("login with glpat-AbCdEf", 1, out);
  a.Cut(2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "login with ");
  EXPECT_TRUE(out[0].truncated);
  EXPECT_EQ(a.truncated_lines(), 1u);
  EXPECT_EQ(a.pending_bytes(), 0u);
  // Flush is an end, not a loss: the line is whole.
  a.Feed("last words", 3, out);
  a.Flush(4, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text, "last words");
  EXPECT_FALSE(out[1].truncated);
}

}  // namespace
}  // namespace ithbat::collect::joblog
