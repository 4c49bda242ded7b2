#include "collect/joblog/tensorboard/tensorboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "testutil/testutil.h"
#include "testutil/tfevents_writer.h"

namespace ithbat::collect::joblog::tensorboard {
namespace {

using ithbat::testing::ScalarStyle;
using ithbat::testing::TempDir;
using ithbat::testing::TfEventsWriter;
using ithbat::testing::TfRecord;

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// ---- CRC ----

TEST(TensorboardCrcTest, KnownValueAndAgreesWithTheWritersBitwiseCrc) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  std::string data;
  for (int k = 0; k < 1000; ++k) data.push_back(static_cast<char>(k * 7));
  EXPECT_EQ(Crc32c(data), ithbat::testing::Crc32cBitwise(data));
  EXPECT_EQ(Crc32c(data.substr(300), Crc32c(data.substr(0, 300))), Crc32c(data));
}

// ---- Event decoding, on bytes written out by hand ----

// PyTorch SummaryWriter: Event{wall_time, step, summary{value{tag, simple_value}}}.
const std::string kPytorchEvent = Bytes({
    0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41,  // 1: wall_time = 1700000000.5 (fixed64)
    0x10, 0x2a,                                            // 2: step = 42
    0x2a, 0x0d,                                            // 5: summary, 13 bytes
    0x0a, 0x0b,                                            //   1: value, 11 bytes
    0x0a, 0x04, 'l', 'o', 's', 's',                        //     1: tag = "loss"
    0x15, 0x00, 0x00, 0x60, 0x3f,                          //     2: simple_value = 0.875f
});

TEST(TensorboardDecodeTest, PytorchSimpleValue) {
  auto s = DecodeEvent(kPytorchEvent);
  ASSERT_TRUE(s) << s.error().ToString();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].tag, "loss");
  EXPECT_EQ((*s)[0].step, 42);
  EXPECT_DOUBLE_EQ((*s)[0].wall_time, 1700000000.5);
  EXPECT_DOUBLE_EQ((*s)[0].value, 0.875);
}

TEST(TensorboardDecodeTest, Tf2TensorScalarsInEachEncoding) {
  // step first, then the summary with three values: a DT_FLOAT tensor with packed float_val and
  // "scalars" metadata, a DT_DOUBLE tensor_content, a DT_INT64 negative int64_val.
  const std::string ev = Bytes({
      0x10, 0x07,  // 2: step = 7
      0x2a, 0x51,  // 5: summary, 81 bytes
      // value 1 (30 bytes): tag "acc", metadata{plugin_data{plugin_name "scalars"}}, tensor
      0x0a, 0x1e,
      0x0a, 0x03, 'a', 'c', 'c',
      0x4a, 0x0b, 0x0a, 0x09, 0x0a, 0x07, 's', 'c', 'a', 'l', 'a', 'r', 's',
      0x42, 0x0a, 0x08, 0x01, 0x12, 0x00, 0x2a, 0x04, 0x00, 0x00, 0x60, 0x3f,  // dtype 1, shape {}, float_val [0.875]
      // value 2 (24 bytes): tag "lr", tensor{dtype 2, shape {dim{size 1}}, tensor_content 8 bytes}
      0x0a, 0x18,
      0x0a, 0x02, 'l', 'r',
      0x42, 0x12, 0x08, 0x02, 0x12, 0x04, 0x12, 0x02, 0x08, 0x01,
      0x22, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd0, 0x3f,  // 0.25
      // value 3 (21 bytes): tag "n", tensor{dtype 9, int64_val -3 (10-byte varint)}, node_name field 7
      0x0a, 0x15,
      0x0a, 0x01, 'n',
      0x42, 0x0d, 0x08, 0x09, 0x50, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
      0x3a, 0x01, 'x',
  });
  auto s = DecodeEvent(ev);
  ASSERT_TRUE(s) << s.error().ToString();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].tag, "acc");
  EXPECT_DOUBLE_EQ((*s)[0].value, 0.875);
  EXPECT_EQ((*s)[0].step, 7);
  EXPECT_EQ((*s)[1].tag, "lr");
  EXPECT_DOUBLE_EQ((*s)[1].value, 0.25);
  EXPECT_EQ((*s)[2].tag, "n");
  EXPECT_DOUBLE_EQ((*s)[2].value, -3);
  EXPECT_EQ((*s)[2].step, 7);
}

TEST(TensorboardDecodeTest, NonScalarValuesAreSkipped) {
  const std::string ev = Bytes({
      0xf8, 0x06, 0x01,                    // field 111 varint: unknown, skipped
      0x1a, 0x03, 'a', 'b', 'c',           // 3: file_version
      0x2a, 0x2d,                          // 5: summary, 45 bytes
      // "text" plugin metadata, one float element (24 bytes)
      0x0a, 0x16, 0x0a, 0x01, 't', 0x4a, 0x08, 0x0a, 0x06, 0x0a, 0x04, 't', 'e', 'x', 't',
      0x42, 0x07, 0x08, 0x01, 0x2d, 0x00, 0x00, 0x80, 0x3f,
      // a two-element float tensor (21 bytes)
      0x0a, 0x13, 0x0a, 0x01, 'v', 0x42, 0x0e, 0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02,
      0x2a, 0x04, 0x00, 0x00, 0x80, 0x3f,
  });
  auto s = DecodeEvent(ev);
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_TRUE(s->empty());
  auto fv = DecodeEvent(ithbat::testing::EncodeFileVersionEvent(1.0));
  ASSERT_TRUE(fv);
  EXPECT_TRUE(fv->empty());
}

TEST(TensorboardDecodeTest, MalformedInputIsAnErrorNeverACrash) {
  EXPECT_FALSE(DecodeEvent(Bytes({0x10})));                     // truncated varint
  EXPECT_FALSE(DecodeEvent(Bytes({0x2a, 0x7f, 0x00})));         // length past the end
  EXPECT_FALSE(DecodeEvent(Bytes({0x08, 0x01})));               // wall_time as a varint
  EXPECT_FALSE(DecodeEvent(Bytes({0x0b})));                     // group (wire type 3)
  EXPECT_FALSE(DecodeEvent(Bytes({0x00, 0x00})));               // field 0
  EXPECT_FALSE(DecodeEvent(std::string(11, '\xff')));            // 11-byte varint
  // Every prefix of a valid event either decodes or is refused.
  for (size_t n = 0; n <= kPytorchEvent.size(); ++n) {
    auto r = DecodeEvent(std::string_view(kPytorchEvent).substr(0, n));
    if (n == kPytorchEvent.size()) {
      EXPECT_TRUE(r);
    }
  }
  auto empty = DecodeEvent("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

// ---- Tag mapping ----

TEST(TensorboardScalarToEventTest, VocabularyOfTheParsers) {
  struct Want {
    std::string tag;
    EventKind kind;
    std::string name;
  };
  const Want kWant[] = {
      {"train/loss", EventKind::kLoss, "loss"},
      {"loss", EventKind::kLoss, "loss"},
      {"train_loss", EventKind::kLoss, "loss"},
      {"Loss/train", EventKind::kLoss, "loss"},
      {"lm loss", EventKind::kLoss, "loss"},
      {"lr", EventKind::kTrainMetric, "lr"},
      {"learning_rate", EventKind::kTrainMetric, "lr"},
      {"train/learning_rate", EventKind::kTrainMetric, "lr"},
      {"learning-rate", EventKind::kTrainMetric, "lr"},
      {"grad_norm", EventKind::kTrainMetric, "grad_norm"},
      {"train/grad_norm", EventKind::kTrainMetric, "grad_norm"},
      {"grad-norm", EventKind::kTrainMetric, "grad_norm"},
      {"eval/loss", EventKind::kEvalMetric, "eval_loss"},
      {"eval_loss", EventKind::kEvalMetric, "eval_loss"},
      {"val_loss", EventKind::kEvalMetric, "eval_loss"},
      {"validation/loss", EventKind::kEvalMetric, "eval_loss"},
      {"lm loss validation", EventKind::kEvalMetric, "eval_loss"},
      {"eval/accuracy", EventKind::kEvalMetric, "eval_accuracy"},
      {"val/TopOneAcc", EventKind::kEvalMetric, "eval_top_one_acc"},
      {"throughput/tps", EventKind::kTrainMetric, "tokens_per_second"},
      {"throughput(tps)", EventKind::kTrainMetric, "tokens_per_second"},
      {"train/samples_per_second", EventKind::kTrainMetric, "samples_per_second"},
      {"loss-scale", EventKind::kTrainMetric, "loss_scale"},
      {"memory/max_reserved(GiB)", EventKind::kTrainMetric, "memory_max_reserved_gi_b"},
      {"myCustomMetric", EventKind::kTrainMetric, "my_custom_metric"},
  };
  for (const Want& w : kWant) {
    auto ev = ScalarToEvent(Scalar{.step = 5, .wall_time = 1, .tag = w.tag, .value = 2.5});
    ASSERT_TRUE(ev) << w.tag;
    EXPECT_EQ(ev->kind, w.kind) << w.tag;
    EXPECT_EQ(ev->name, w.name) << w.tag;
    EXPECT_EQ(ev->step, 5);
    EXPECT_EQ(ev->value, 2.5);
    ASSERT_EQ(ev->attrs.size(), 1u);
    EXPECT_EQ(ev->attrs[0].second, w.tag);
  }
  EXPECT_FALSE(ScalarToEvent(Scalar{.tag = "//"}));
  EXPECT_FALSE(ScalarToEvent(Scalar{.tag = ""}));
  auto longname = ScalarToEvent(Scalar{.tag = std::string(1000, 'a')});
  ASSERT_TRUE(longname);
  EXPECT_LE(longname->name.size(), 64u);
  auto nan = ScalarToEvent(Scalar{.tag = "train/loss", .value = std::nan("")});
  ASSERT_TRUE(nan);
  EXPECT_TRUE(std::isnan(nan->value));
}

// ---- Record framing ----

TEST(TensorboardRecordReaderTest, PartialRecordsWaitAndOversizeRecordsAreSkipped) {
  RecordReader r;
  const std::string rec = TfRecord("hello");
  std::string_view out;
  for (size_t k = 0; k + 1 < rec.size(); ++k) {
    r.Append(rec.substr(k, 1));
    EXPECT_EQ(r.Next(out), RecordReader::Status::kNeedMore);
  }
  r.Append(rec.substr(rec.size() - 1));
  ASSERT_EQ(r.Next(out), RecordReader::Status::kRecord);
  EXPECT_EQ(out, "hello");
  // A record over the bound: header with a valid CRC, then its body in pieces.
  const uint64_t big = kMaxRecordBytes + 100;
  std::string header;
  for (int k = 0; k < 8; ++k) header.push_back(static_cast<char>((big >> (8 * k)) & 0xff));
  const uint32_t crc = MaskCrc(Crc32c(header));
  for (int k = 0; k < 4; ++k) header.push_back(static_cast<char>((crc >> (8 * k)) & 0xff));
  r.Append(header);
  EXPECT_EQ(r.Next(out), RecordReader::Status::kSkippedOversize);
  const std::string piece(1 << 20, 'z');
  uint64_t left = big + 4;
  while (left > 0) {
    const size_t n = std::min<uint64_t>(left, piece.size());
    r.Append(std::string_view(piece).substr(0, n));
    left -= n;
    EXPECT_LE(r.buffered_bytes(), piece.size());
    if (left > 0) {
      EXPECT_EQ(r.Next(out), RecordReader::Status::kNeedMore);
    }
  }
  r.Append(TfRecord("after"));
  ASSERT_EQ(r.Next(out), RecordReader::Status::kRecord);
  EXPECT_EQ(out, "after");
  EXPECT_EQ(r.offset(), rec.size() + 12 + big + 4 + 5 + 16);
}

// ---- Following a file ----

class TensorboardFollowerTest : public ::testing::Test {
 protected:
  std::string Path() const { return (dir_.path() / "events.out.tfevents.1700000000.host.1.0").string(); }
  std::vector<Scalar> PollAll(FileFollower& f) {
    std::vector<Scalar> out;
    auto n = f.Poll(out);
    EXPECT_TRUE(n) << n.error().ToString();
    return out;
  }
  TempDir dir_;
};

TEST_F(TensorboardFollowerTest, RoundTripWithTheWriterInBothStyles) {
  TfEventsWriter w(Path());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w.WriteFileVersion(1700000000.0));
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE(w.WriteScalar(step, "train/loss", 4.0f - 0.5f * static_cast<float>(step), 1700000000.0 + step));
    ASSERT_TRUE(w.WriteScalar(step, "train/learning_rate", 0.001f, 1700000000.0 + step, ScalarStyle::kTensor));
  }
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f) << f.error().ToString();
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 10u);
  for (int step = 1; step <= 5; ++step) {
    const Scalar& loss = got[2 * (step - 1)];
    const Scalar& lr = got[2 * (step - 1) + 1];
    EXPECT_EQ(loss.tag, "train/loss");
    EXPECT_EQ(loss.step, step);
    EXPECT_DOUBLE_EQ(loss.value, 4.0 - 0.5 * step);
    EXPECT_DOUBLE_EQ(loss.wall_time, 1700000000.0 + step);
    EXPECT_EQ(lr.tag, "train/learning_rate");
    EXPECT_DOUBLE_EQ(lr.value, static_cast<double>(0.001f));
    auto ev = ScalarToEvent(loss);
    ASSERT_TRUE(ev);
    EXPECT_EQ(ev->kind, EventKind::kLoss);
  }
  EXPECT_EQ(f->records(), 11u);
  EXPECT_EQ(f->scalars(), 10u);
  EXPECT_EQ(f->corrupt_records(), 0u);
  EXPECT_EQ(f->bytes_read(), std::filesystem::file_size(Path()));
  // Nothing new: nothing read.
  EXPECT_TRUE(PollAll(*f).empty());
  ASSERT_TRUE(w.WriteScalar(6, "train/loss", 0.5f, 1700000006.0));
  auto more = PollAll(*f);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].step, 6);
}

TEST_F(TensorboardFollowerTest, TruncatedTailWaitsThenCompletes) {
  TfEventsWriter w(Path());
  const std::string rec = TfRecord(ithbat::testing::EncodeScalarEvent(3, 1.0, "loss", 1.25f, ScalarStyle::kSimpleValue, false));
  ASSERT_TRUE(w.WriteRaw(rec.substr(0, 7)));
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  EXPECT_TRUE(PollAll(*f).empty());
  ASSERT_TRUE(w.WriteRaw(rec.substr(7, 20)));
  EXPECT_TRUE(PollAll(*f).empty());
  ASSERT_TRUE(w.WriteRaw(rec.substr(27)));
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 3);
  EXPECT_EQ(f->corrupt_records(), 0u);
}

TEST_F(TensorboardFollowerTest, CorruptDataCrcSkipsOneRecord) {
  TfEventsWriter w(Path());
  std::string bad = TfRecord(ithbat::testing::EncodeScalarEvent(1, 1.0, "loss", 3.0f, ScalarStyle::kSimpleValue, false));
  bad[14] ^= 0x40;  // inside the data
  ASSERT_TRUE(w.WriteRaw(bad));
  // Valid CRCs but not a protobuf: counted the same way.
  ASSERT_TRUE(w.WriteRaw(TfRecord(std::string("\x2a\x7f", 2))));
  ASSERT_TRUE(w.WriteScalar(2, "loss", 2.0f, 2.0));
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 2);
  EXPECT_EQ(f->corrupt_records(), 2u);
  EXPECT_EQ(f->records(), 3u);
  EXPECT_FALSE(f->broken());
}

TEST_F(TensorboardFollowerTest, CorruptLengthStopsFollowingUntilTheFileIsTruncated) {
  {
    TfEventsWriter w(Path());
    ASSERT_TRUE(w.WriteScalar(1, "loss", 3.0f, 1.0));
    std::string bad = TfRecord(ithbat::testing::EncodeScalarEvent(2, 1.0, "loss", 2.0f, ScalarStyle::kSimpleValue, false));
    bad[2] ^= 0x01;  // inside the length
    ASSERT_TRUE(w.WriteRaw(bad));
    ASSERT_TRUE(w.WriteScalar(3, "loss", 1.0f, 1.0));
  }
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  std::vector<Scalar> out;
  auto r = f->Poll(out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCorrupt);
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("not followed"));
  EXPECT_TRUE(f->broken());
  ASSERT_EQ(out.size(), 1u);  // what came before the break is kept
  EXPECT_EQ(out[0].step, 1);
  auto again = f->Poll(out);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kCorrupt);
  // The job starts over in the same file (truncates it): followed afresh.
  std::filesystem::resize_file(Path(), 0);
  {
    TfEventsWriter w(Path());
    ASSERT_TRUE(w.WriteScalar(10, "loss", 0.5f, 1.0));
  }
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 10);
  EXPECT_EQ(f->restarts(), 1u);
  EXPECT_FALSE(f->broken());
}

// The path is never looked up again: another file renamed over it (or a symlink, a FIFO) is
// not what the follower reads; it keeps to the inode it opened, which the writer may still
// append to through its descriptor.
TEST_F(TensorboardFollowerTest, FileReplacedUnderItsNameIsNotReopened) {
  TfEventsWriter w(Path());
  ASSERT_TRUE(w.WriteScalar(1, "loss", 3.0f, 1.0));
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  EXPECT_EQ(PollAll(*f).size(), 1u);
  const std::string tmp = Path() + ".new";
  {
    TfEventsWriter other(tmp);
    ASSERT_TRUE(other.WriteScalar(99, "loss", 0.5f, 1.0));
  }
  std::filesystem::rename(tmp, Path());
  ASSERT_TRUE(w.WriteScalar(2, "loss", 2.0f, 2.0));  // the original writer, its original inode
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 2);
  EXPECT_EQ(f->restarts(), 0u);
}

TEST_F(TensorboardFollowerTest, TruncatedFileStartsOver) {
  {
    TfEventsWriter w(Path());
    for (int s = 1; s <= 3; ++s) ASSERT_TRUE(w.WriteScalar(s, "loss", 1.0f, 1.0));
  }
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  EXPECT_EQ(PollAll(*f).size(), 3u);
  std::filesystem::resize_file(Path(), 0);
  {
    TfEventsWriter w(Path());
    ASSERT_TRUE(w.WriteScalar(1, "loss", 9.0f, 1.0));
  }
  auto got = PollAll(*f);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0].value, 9.0);
  EXPECT_EQ(f->restarts(), 1u);
}

TEST_F(TensorboardFollowerTest, GarbageIsACorruptErrorAndPollIsBounded) {
  std::string junk;
  uint32_t x = 7;
  for (int k = 0; k < 300000; ++k) {
    x = x * 1664525 + 1013904223;
    junk.push_back(static_cast<char>(x >> 24));
  }
  dir_.WriteFile(std::filesystem::path(Path()).filename().string(), junk);
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  std::vector<Scalar> out;
  auto r = f->Poll(out, 1000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kCorrupt);
  EXPECT_LE(f->bytes_read(), 1000u);
  EXPECT_TRUE(out.empty());
}

TEST_F(TensorboardFollowerTest, PollReadsAtMostMaxBytes) {
  {
    TfEventsWriter w(Path());
    for (int s = 1; s <= 100; ++s) ASSERT_TRUE(w.WriteScalar(s, "loss", 1.0f, 1.0));
  }
  auto f = FileFollower::Open(Path());
  ASSERT_TRUE(f);
  std::vector<Scalar> out;
  size_t polls = 0;
  for (;;) {
    auto n = f->Poll(out, 100);
    ASSERT_TRUE(n);
    ++polls;
    EXPECT_LE(*n, 100u);
    if (*n < 100) break;
  }
  EXPECT_EQ(out.size(), 100u);
  EXPECT_GT(polls, 10u);
}

TEST(TensorboardFollowerOpenTest, SymlinkFifoAndDeviceAreRefused) {
  TempDir dir;
  const auto fifo = dir.path() / "events.out.tfevents.1.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: a blocking open would wait forever.
  auto f = FileFollower::Open(fifo.string());
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  const auto link = dir.path() / "events.out.tfevents.1.link";
  std::filesystem::create_symlink("/dev/null", link);
  EXPECT_FALSE(FileFollower::Open(link.string()));
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto d = FileFollower::FromFd(fd, "/dev/null");  // owns fd, closes it on refusal
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument);
}

TEST(TensorboardFollowerOpenTest, MissingFileIsNotFound) {
  auto f = FileFollower::Open("/nonexistent/events.out.tfevents.1");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ithbat::collect::joblog::tensorboard
