// The file-tail source: from the end at start, rotation and truncation read from the start,
// bounded reads; and the collector in tail mode attributing lines to the configured identity.
#include "collect/joblog/tail_source.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "collect/joblog/joblog_collector.h"
#include "joblog_capture/capture_test_util.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

void Append(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::app | std::ios::binary);
  f << text;
}

std::string DrainText(TailCaptureSource& s) {
  std::vector<CaptureRecord> recs;
  s.Drain(recs, 1000);
  std::string out;
  for (const auto& r : recs) {
    EXPECT_EQ(r.pid, -1);
    out += r.data;
  }
  return out;
}

TEST(TailSource, StartsAtTheEndThenFollowsRotationAndTruncation) {
  testing::TempDir dir;
  const auto log = dir.path() / "train.log";
  Append(log, "old history\n");
  TailSourceOptions o;
  o.files.push_back(TailFile{log.string(), {}});
  TailCaptureSource s(o);
  ASSERT_TRUE(s.Start().has_value());
  EXPECT_EQ(DrainText(s), "") << "history present at start is not replayed";
  Append(log, "line 1\n");
  EXPECT_EQ(DrainText(s), "line 1\n");
  EXPECT_EQ(DrainText(s), "");

  // Rotation: the file is renamed away and a new one created under the path.
  std::filesystem::rename(log, dir.path() / "train.log.1");
  Append(log, "after rotation\n");
  EXPECT_EQ(DrainText(s), "after rotation\n");

  // Truncation (copytruncate): read again from the start.
  std::filesystem::resize_file(log, 0);
  Append(log, "new\n");
  EXPECT_EQ(DrainText(s), "new\n");
  EXPECT_EQ(s.reopens(), 2u);
}

// The old file's unterminated last line must not be glued to the new file's first line: the
// first record after a rotation or truncation says so (gap_before), and the collector ends the
// pending line there.
TEST(TailSource, RotationMarksTheFirstRecordOfTheNewFile) {
  testing::TempDir dir;
  const auto log = dir.path() / "train.log";
  Append(log, "");
  TailSourceOptions o;
  o.files.push_back(TailFile{log.string(), {}});
  TailCaptureSource s(o);
  ASSERT_TRUE(s.Start().has_value());
  Append(log, "line 1\nunterminated");
  std::vector<CaptureRecord> recs;
  s.Drain(recs, 100);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_FALSE(recs[0].gap_before);
  std::filesystem::rename(log, dir.path() / "train.log.1");
  Append(log, "fresh\n");
  recs.clear();
  s.Drain(recs, 100);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(recs[0].gap_before);
  Append(log, "more\n");
  recs.clear();
  s.Drain(recs, 100);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_FALSE(recs[0].gap_before);
  std::filesystem::resize_file(log, 0);
  Append(log, "x\n");
  recs.clear();
  s.Drain(recs, 100);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(recs[0].gap_before) << "truncation too";
}

// A symlink put where the followed file was is not followed (it could name a FIFO or a
// device, or a file the job may not read).
TEST(TailSource, ASymlinkInPlaceOfTheFileIsNotFollowed) {
  testing::TempDir dir;
  const auto target = dir.path() / "secret.txt";
  Append(target, "not for the agent\n");
  const auto log = dir.path() / "train.log";
  std::filesystem::create_symlink(target, log);
  TailSourceOptions o;
  o.from_start = true;
  o.files.push_back(TailFile{log.string(), {}});
  TailCaptureSource s(o);
  ASSERT_TRUE(s.Start().has_value());
  EXPECT_EQ(DrainText(s), "");
}

TEST(TailSource, AFileThatAppearsLaterIsReadFromItsStartAndReadsAreBounded) {
  testing::TempDir dir;
  const auto log = dir.path() / "late.log";
  TailSourceOptions o;
  o.files.push_back(TailFile{log.string(), {}});
  o.max_bytes_per_drain = 1000;
  TailCaptureSource s(o);
  ASSERT_TRUE(s.Start().has_value());
  EXPECT_EQ(DrainText(s), "");
  Append(log, std::string(2500, 'a'));
  EXPECT_EQ(DrainText(s).size(), 1000u);
  EXPECT_EQ(DrainText(s).size(), 1000u);
  EXPECT_EQ(DrainText(s).size(), 500u);
}

TEST(TailSource, CollectorAttributesLinesToTheConfiguredIdentity) {
  testing::TempDir dir;
  const auto log = dir.path() / "rank2.log";
  Append(log, "");
  JobLogOptions o;
  o.mode = CaptureMode::kTail;
  auto spec = ParseTailSpec(log.string() + "?job=77&rank=2");
  ASSERT_TRUE(spec.has_value());
  o.tail.push_back(*spec);
  auto c = JobLogCollector::Create(std::move(o));
  ASSERT_TRUE(c.has_value());
  testing::FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value());
  EXPECT_EQ((*c)->effective_mode(), CaptureMode::kTail);
  EXPECT_EQ((*c)->Health().degraded, "");
  Append(log, testing::MegatronLine(12, 1.75) + "\n");
  ASSERT_TRUE((*c)->Collect(NowNs()).has_value());
  const Event* loss = testing::LossAt(sink.events(), 12);
  ASSERT_NE(loss, nullptr);
  EXPECT_DOUBLE_EQ(loss->value, 1.75);
  EXPECT_EQ(loss->identity.job, "77");
  EXPECT_EQ(loss->identity.rank, 2);
  EXPECT_EQ(sink.Last("ithbat_joblog_capture_mode", "{attachment=\"tail\",mode=\"tail\"}"), 1.0);
  (*c)->Stop();
}

TEST(TailSource, OffModeCapturesNothingAndIsNotDegraded) {
  JobLogOptions o;
  o.mode = CaptureMode::kOff;
  auto c = JobLogCollector::Create(std::move(o));
  ASSERT_TRUE(c.has_value());
  testing::FakeSink sink;
  ASSERT_TRUE((*c)->Init(sink).has_value());
  ASSERT_TRUE((*c)->Start().has_value());
  ASSERT_TRUE((*c)->Collect(NowNs()).has_value());
  EXPECT_EQ((*c)->effective_mode(), CaptureMode::kOff);
  EXPECT_EQ((*c)->Health().degraded, "");
  EXPECT_EQ(sink.Last("ithbat_joblog_capture_mode", "{attachment=\"none\",mode=\"off\"}"), 1.0);
}

}  // namespace
}  // namespace ithbat::collect::joblog
