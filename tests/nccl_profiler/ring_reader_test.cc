// The agent's reader of the plugin's ring against well-formed and hostile files: every header
// field, truncation, links, FIFOs, records lapped/torn/impossible, a file rewritten while read.
#include "collect/nccl_profiler/ring_reader.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ithbat_nccl_ring.h"
#include "testutil/testutil.h"

namespace ithbat::collect::nccl_profiler {
namespace {

using testing::TempDir;

// This host's CLOCK_REALTIME - CLOCK_MONOTONIC: records carry the writer's, and the reader refuses
// one more than a day from its own.
int64_t HostOffset() {
  timespec m{}, r{};
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  return (int64_t{r.tv_sec} - m.tv_sec) * 1'000'000'000 + (r.tv_nsec - m.tv_nsec);
}

int64_t HostOffsetOf(const NcclRecord& r) { return r.enqueue - 1'000'000'000; }

// A ring image built by hand, as the plugin would write it.
struct Image {
  IthbatNcclRingHeader header{};
  std::vector<IthbatNcclRecord> records;

  explicit Image(uint32_t capacity = 16) {
    header.magic = ITHBAT_NCCL_RING_MAGIC;
    header.version = ITHBAT_NCCL_RING_VERSION;
    header.header_size = sizeof(IthbatNcclRingHeader);
    header.record_size = sizeof(IthbatNcclRecord);
    header.capacity = capacity;
    header.pid = 1234;
    records.resize(capacity);
  }
  static IthbatNcclRecord Valid(uint64_t seq_number) {
    IthbatNcclRecord r{};
    r.comm_id = 0xabc;
    r.seq_number = seq_number;
    r.count = 256;
    r.bytes = 1024;
    r.enqueue_mono_ns = 1'000'000'000;
    r.realtime_minus_monotonic_ns = HostOffset();
    // A GPU timer on wall-clock time: the correction is about -(REALTIME - MONOTONIC).
    r.gpu_to_mono_ns = -r.realtime_minus_monotonic_ns;
    r.gpu_start_ns = static_cast<uint64_t>(2'000'000'000 + r.realtime_minus_monotonic_ns) + seq_number * 1000;
    r.gpu_stop_ns = r.gpu_start_ns + 5000;
    r.rank = 1;
    r.nranks = 2;
    r.peer_or_root = -1;
    r.kind = ITHBAT_NCCL_KIND_COLL;
    r.dtype_size = 4;
    r.channels = 2;
    r.flags = ITHBAT_NCCL_FLAG_GPU_TIMED;
    std::strcpy(r.func, "AllReduce");
    std::strcpy(r.datatype, "ncclFloat32");
    return r;
  }
  // Commits record number idx (as the writer does: seq = 2*idx+2).
  void Put(uint64_t idx, IthbatNcclRecord r) {
    r.seq = 2 * idx + 2;
    records[idx & (header.capacity - 1)] = r;
    header.head = std::max(header.head, idx + 1);
  }
  void Write(const std::filesystem::path& p, size_t truncate_to = SIZE_MAX) const {
    std::string bytes(reinterpret_cast<const char*>(&header), sizeof(header));
    bytes.append(reinterpret_cast<const char*>(records.data()), records.size() * sizeof(IthbatNcclRecord));
    if (truncate_to < bytes.size()) bytes.resize(truncate_to);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
};

Result<std::unique_ptr<RingReader>> OpenFile(const std::filesystem::path& p) {
  return RingReader::Open(p, false);
}

TEST(RingReaderTest, ReadsCommittedRecordsInOrderAndOnlyNewOnes) {
  TempDir dir;
  Image img;
  for (uint64_t i = 0; i < 5; ++i) img.Put(i, Image::Valid(i));
  const auto path = dir.path() / "ithbat-ncclprof-1234.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out[i].seq_number, i);
    EXPECT_EQ(out[i].op, "all_reduce");
    EXPECT_TRUE(out[i].timed);
    EXPECT_EQ(out[i].gpu_stop_mono - out[i].gpu_start_mono, 5000);
    EXPECT_EQ(out[i].gpu_start_mono, static_cast<int64_t>(2'000'000'000 + i * 1000));  // raw + correction
    EXPECT_EQ(out[i].gpu_start, static_cast<TimeNs>(out[i].gpu_start_mono + HostOffsetOf(out[i])));
  }
  out.clear();
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_TRUE(out.empty());
  for (uint64_t i = 5; i < 8; ++i) img.Put(i, Image::Valid(i));
  img.Write(path);
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].seq_number, 5u);
  EXPECT_EQ((*r)->losses().overrun + (*r)->losses().torn + (*r)->losses().invalid, 0u);
}

TEST(RingReaderTest, LateReaderStartsAtOldestRecordAndCountsTheRestAsOverrun) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 40; ++i) img.Put(i, Image::Valid(i));
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 16u);
  EXPECT_EQ(out.front().seq_number, 24u);
  EXPECT_EQ((*r)->losses().overrun, 24u);
}

TEST(RingReaderTest, WriterLappingTheReaderBetweenReadsIsCountedAsOverrun) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 4; ++i) img.Put(i, Image::Valid(i));
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 4u);
  for (uint64_t i = 4; i < 54; ++i) img.Put(i, Image::Valid(i));  // 50 more, capacity 16
  img.Write(path);
  out.clear();
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_EQ(out.size(), 16u);
  EXPECT_EQ((*r)->losses().overrun, 34u);
  EXPECT_EQ(out.front().seq_number, 38u);
}

TEST(RingReaderTest, SlotAlreadyRewrittenByALaterLapIsSkippedNotReturned) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 3; ++i) img.Put(i, Image::Valid(i));
  // Slot 1 claims record 17 (a writer a lap ahead of head's view): not record 1.
  IthbatNcclRecord later = Image::Valid(99);
  later.seq = 2 * 17 + 2;
  img.records[1] = later;
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].seq_number, 0u);
  EXPECT_EQ(out[1].seq_number, 2u);
  EXPECT_EQ((*r)->losses().overrun, 1u);
}

TEST(RingReaderTest, UncommittedRecordNearHeadIsRetriedFarBehindHeadIsGivenUp) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 3; ++i) img.Put(i, Image::Valid(i));
  img.records[2].seq = 2 * 2 + 1;  // being written
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_EQ(out.size(), 2u);  // stops before the open record
  EXPECT_EQ((*r)->next_index(), 2u);
  // The writer died there; 12 more records follow: the open one is given up (torn).
  for (uint64_t i = 3; i < 15; ++i) img.Put(i, Image::Valid(i));
  img.Write(path);
  out.clear();
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_EQ(out.size(), 12u);
  EXPECT_EQ((*r)->losses().torn, 1u);
}

TEST(RingReaderTest, RecordsWithImpossibleFieldsAreCountedInvalid) {
  TempDir dir;
  Image img(16);
  uint64_t idx = 0;
  auto bad = [&](auto mutate) {
    IthbatNcclRecord r = Image::Valid(idx);
    mutate(r);
    img.Put(idx++, r);
  };
  bad([](IthbatNcclRecord& r) { r.rank = 2; });                                // rank >= nranks
  bad([](IthbatNcclRecord& r) { r.nranks = 0; });                              // no ranks
  bad([](IthbatNcclRecord& r) { r.kind = 7; });                                // unknown kind
  bad([](IthbatNcclRecord& r) { std::memset(r.func, 'A', sizeof(r.func)); });  // not terminated
  bad([](IthbatNcclRecord& r) { std::strcpy(r.datatype, "bad\ntype"); });      // control char
  bad([](IthbatNcclRecord& r) { r.flags = 0x80; });                            // unknown flag
  bad([](IthbatNcclRecord& r) { r.peer_or_root = 5; });                        // peer out of range
  bad([](IthbatNcclRecord& r) { r.bytes = 1; });                               // fewer bytes than one element
  img.Put(idx, Image::Valid(idx));
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seq_number, idx);
  EXPECT_EQ((*r)->losses().invalid, idx);
}

// Job-controlled numbers at the extremes: refused (never summed into an overflow), counted.
TEST(RingReaderTest, ExtremeTimesAndOffsetsAreRefusedWithoutOverflow) {
  TempDir dir;
  Image img(32);
  uint64_t idx = 0;
  auto put = [&](auto mutate) {
    IthbatNcclRecord r = Image::Valid(idx);
    mutate(r);
    img.Put(idx++, r);
  };
  // Whole record invalid: the enqueue time or the clock offset cannot be trusted.
  put([](IthbatNcclRecord& r) { r.realtime_minus_monotonic_ns = INT64_MAX; });
  put([](IthbatNcclRecord& r) { r.realtime_minus_monotonic_ns = INT64_MIN; });
  put([](IthbatNcclRecord& r) { r.realtime_minus_monotonic_ns += 2 * 86'400'000'000'000; });  // 2 days off
  put([](IthbatNcclRecord& r) { r.enqueue_mono_ns = UINT64_MAX; });
  put([](IthbatNcclRecord& r) { r.enqueue_mono_ns = static_cast<uint64_t>(INT64_MAX); });
  const uint64_t invalid = idx;
  // Only the GPU times refused: the operation is kept, untimed, and counted as clock.
  put([](IthbatNcclRecord& r) { r.gpu_start_ns = static_cast<uint64_t>(INT64_MAX); });
  put([](IthbatNcclRecord& r) { r.gpu_stop_ns = UINT64_MAX; });
  put([](IthbatNcclRecord& r) { r.gpu_to_mono_ns = INT64_MAX; });
  put([](IthbatNcclRecord& r) { r.gpu_to_mono_ns = INT64_MIN; });
  put([](IthbatNcclRecord& r) {
    r.gpu_start_ns = static_cast<uint64_t>(INT64_MAX);
    r.gpu_stop_ns = static_cast<uint64_t>(INT64_MAX);
    r.gpu_to_mono_ns = INT64_MAX;
  });
  put([](IthbatNcclRecord& r) { r.gpu_stop_ns = r.gpu_start_ns - 1; });                    // stop < start
  put([](IthbatNcclRecord& r) { r.gpu_stop_ns = r.gpu_start_ns + 7200'000'000'000ULL; });  // 2 h
  put([](IthbatNcclRecord& r) { r.gpu_to_mono_ns += 2 * 86'400'000'000'000; });  // GPU clock 2 days off
  put([](IthbatNcclRecord& r) { r.gpu_start_ns -= 1'500'000'000; });             // kernel before its enqueue
  const uint64_t clock = idx - invalid;
  img.Put(idx, Image::Valid(idx));
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_EQ((*r)->losses().invalid, invalid);
  EXPECT_EQ((*r)->losses().clock, clock);
  ASSERT_EQ(out.size(), clock + 1);
  for (size_t i = 0; i < clock; ++i) {
    EXPECT_FALSE(out[i].timed) << i;
    EXPECT_EQ(out[i].gpu_start_mono, 0) << i;
  }
  EXPECT_TRUE(out.back().timed);
}

// Two GPUs whose timers are off the host clock by +3 s and -2 s, kernels starting at the same host
// instant: after the plugin's correction both land on the same host time.
TEST(RingReaderTest, EachGpuTimerIsMovedOntoTheHostClock) {
  TempDir dir;
  Image img(16);
  const int64_t host_start = 5'000'000'000;  // CLOCK_MONOTONIC of both kernels' start
  int64_t k = 0;
  for (int64_t skew : {int64_t{3'000'000'000}, int64_t{-2'000'000'000}}) {
    IthbatNcclRecord r = Image::Valid(static_cast<uint64_t>(k));
    r.gpu_start_ns = static_cast<uint64_t>(host_start + r.realtime_minus_monotonic_ns + skew);
    r.gpu_stop_ns = r.gpu_start_ns + 7000;
    r.gpu_to_mono_ns = -r.realtime_minus_monotonic_ns - skew + 4000;  // delivered 4 us late at best
    img.Put(static_cast<uint64_t>(k++), r);
  }
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 2u);
  for (const NcclRecord& rec : out) {
    ASSERT_TRUE(rec.timed);
    EXPECT_EQ(rec.gpu_start_mono, host_start + 4000);
    EXPECT_EQ(rec.gpu_stop_mono - rec.gpu_start_mono, 7000);
    EXPECT_EQ(rec.gpu_start, rec.gpu_start_mono + HostOffsetOf(rec));
  }
}

// A writer killed between claiming a record and committing it: records behind it are read after
// kMaxStuckReads reads, not only once the head is half a ring further.
TEST(RingReaderTest, RecordStuckUncommittedIsGivenUpAfterSomeReads) {
  TempDir dir;
  Image img(64);
  for (uint64_t i = 0; i < 6; ++i) img.Put(i, Image::Valid(i));
  img.records[2].seq = 2 * 2 + 1;
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  for (int i = 0; i < RingReader::kMaxStuckReads; ++i) {
    ASSERT_TRUE((*r)->Read(&out).has_value());
    EXPECT_EQ((*r)->next_index(), 2u) << "read " << i;
  }
  EXPECT_EQ(out.size(), 2u);
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ((*r)->losses().stuck, 1u);
  EXPECT_EQ((*r)->losses().torn, 1u);
  EXPECT_EQ((*r)->next_index(), 6u);
}

TEST(RingReaderTest, OlderRingVersionIsRefused) {
  TempDir dir;
  Image img(16);
  img.header.version = ITHBAT_NCCL_RING_VERSION - 1;
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto r = OpenFile(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("version"), std::string::npos) << r.error().message;
}

TEST(RingReaderTest, UnknownFuncIsLabelledOtherNotPassedThrough) {
  TempDir dir;
  Image img(16);
  IthbatNcclRecord r = Image::Valid(0);
  std::strcpy(r.func, "AllReduceV2Fut");
  img.Put(0, r);
  const auto path = dir.path() / "r.ring";
  img.Write(path);
  auto rr = OpenFile(path);
  ASSERT_TRUE(rr.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*rr)->Read(&out).has_value());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, "other");
}

TEST(RingReaderTest, HeaderChecksRefuseEveryBadField) {
  TempDir dir;
  struct Case {
    const char* name;
    void (*mutate)(Image&);
  };
  const Case cases[] = {
      {"magic", [](Image& i) { i.header.magic ^= 1; }},
      {"version", [](Image& i) { i.header.version = 99; }},
      {"header_size", [](Image& i) { i.header.header_size = 128; }},
      {"record_size", [](Image& i) { i.header.record_size = 64; }},
      {"capacity_not_pow2", [](Image& i) { i.header.capacity = 15; }},
      {"capacity_zero", [](Image& i) { i.header.capacity = 0; }},
      {"capacity_huge", [](Image& i) { i.header.capacity = 1u << 31; }},
      {"capacity_larger_than_file", [](Image& i) { i.header.capacity = 1024; }},
  };
  for (const Case& c : cases) {
    Image img(16);
    c.mutate(img);
    const auto path = dir.path() / (std::string(c.name) + ".ring");
    img.Write(path);
    auto r = OpenFile(path);
    ASSERT_FALSE(r.has_value()) << c.name;
    EXPECT_EQ(r.error().code, ErrorCode::kParse) << c.name;
  }
}

TEST(RingReaderTest, TruncatedFilesAreRefused) {
  TempDir dir;
  Image img(16);
  const auto p1 = dir.path() / "short_header.ring";
  img.Write(p1, 100);
  EXPECT_FALSE(OpenFile(p1).has_value());
  const auto p2 = dir.path() / "short_records.ring";
  img.Write(p2, sizeof(IthbatNcclRingHeader) + 3 * sizeof(IthbatNcclRecord));
  auto r = OpenFile(p2);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
  const auto p3 = dir.path() / "empty.ring";
  img.Write(p3, 0);
  EXPECT_FALSE(OpenFile(p3).has_value());
}

TEST(RingReaderTest, SymlinkIsNotFollowed) {
  TempDir dir;
  Image img(16);
  img.Put(0, Image::Valid(0));
  const auto target = dir.path() / "real.ring";
  img.Write(target);
  const auto link = dir.path() / "ithbat-ncclprof-1.ring";
  std::filesystem::create_symlink(target, link);
  auto r = OpenFile(link);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
}

TEST(RingReaderTest, FifoAndDirectoryAreRefusedWithoutBlocking) {
  TempDir dir;
  const auto fifo = dir.path() / "ithbat-ncclprof-2.ring";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = OpenFile(fifo);  // a blocking open would hang here: nobody writes the FIFO
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
  EXPECT_FALSE(OpenFile(dir.path()).has_value());
}

// A map_files-like link (followed) whose target is not a regular file: refused after an O_PATH
// open, before anything is opened for reading (no FIFO reader appears, no device is opened).
TEST(RingReaderTest, FollowedLinkToFifoOrDeviceIsRefusedBeforeOpening) {
  TempDir dir;
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto to_fifo = dir.path() / "7f00-7f10";
  std::filesystem::create_symlink(fifo, to_fifo);
  auto r = RingReader::Open(to_fifo, /*via_proc_link=*/true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);
  // Nobody holds the FIFO open for reading: a writer that does not block is refused (ENXIO).
  EXPECT_LT(open(fifo.c_str(), O_WRONLY | O_NONBLOCK), 0);
  EXPECT_EQ(errno, ENXIO);
  const auto to_dev = dir.path() / "7f10-7f20";
  std::filesystem::create_symlink("/dev/null", to_dev);
  auto d = RingReader::Open(to_dev, /*via_proc_link=*/true);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::kParse);
}

TEST(RingReaderTest, FileWrongInodeIsRefused) {
  TempDir dir;
  Image img(16);
  const auto p = dir.path() / "r.ring";
  img.Write(p);
  struct stat st {};
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  auto r = RingReader::Open(p, false, st.st_dev, st.st_ino + 1);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(RingReader::Open(p, false, st.st_dev, st.st_ino).has_value());
}

TEST(RingReaderTest, FileTruncatedWhileOpenFailsTheReadWithoutCrashing) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 4; ++i) img.Put(i, Image::Valid(i));
  const auto p = dir.path() / "r.ring";
  img.Write(p);
  auto r = OpenFile(p);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(truncate(p.c_str(), 64), 0);  // a mapping would SIGBUS here
  std::vector<NcclRecord> out;
  auto s = (*r)->Read(&out);
  ASSERT_FALSE(s.has_value());
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE((*r)->Read(&out).has_value());  // stays closed
}

TEST(RingReaderTest, FileRewrittenWithOtherGeometryOrHeadGoingBackIsRefused) {
  TempDir dir;
  Image img(16);
  for (uint64_t i = 0; i < 6; ++i) img.Put(i, Image::Valid(i));
  const auto p = dir.path() / "r.ring";
  img.Write(p);
  {
    auto r = OpenFile(p);
    ASSERT_TRUE(r.has_value());
    std::vector<NcclRecord> out;
    ASSERT_TRUE((*r)->Read(&out).has_value());
    Image other(32);  // same file, other capacity
    other.Write(p);
    auto s = (*r)->Read(&out);
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code, ErrorCode::kParse);
  }
  img.Write(p);
  auto r = OpenFile(p);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  img.header.head = 2;  // went backwards
  img.Write(p);
  EXPECT_FALSE((*r)->Read(&out).has_value());
}

TEST(RingReaderTest, HeadFarBeyondAnythingWrittenReadsNothingBogus) {
  TempDir dir;
  Image img(16);
  img.header.head = UINT64_MAX / 4;  // nothing committed at those indices
  const auto p = dir.path() / "r.ring";
  img.Write(p);
  auto r = OpenFile(p);
  ASSERT_TRUE(r.has_value());
  std::vector<NcclRecord> out;
  ASSERT_TRUE((*r)->Read(&out).has_value());
  EXPECT_TRUE(out.empty());
}

TEST(RingReaderTest, RingPathRecognition) {
  EXPECT_TRUE(IsRingPath("/dev/shm/ithbat-ncclprof-123.ring"));
  EXPECT_TRUE(IsRingPath("/dev/shm/ithbat-ncclprof-123.ring (deleted)"));
  EXPECT_TRUE(IsRingPath("ithbat-ncclprof-7.ring"));
  EXPECT_FALSE(IsRingPath("/dev/shm/ithbat-ncclprof-.ring"));
  EXPECT_FALSE(IsRingPath("/dev/shm/ithbat-ncclprof-12x.ring"));
  EXPECT_FALSE(IsRingPath("/dev/shm/ithbat-nccl-0123abcd"));  // the fake NCCL's communicator file
  EXPECT_FALSE(IsRingPath("/usr/lib/libnccl.so.2"));
  EXPECT_FALSE(IsRingPath(""));
}

}  // namespace
}  // namespace ithbat::collect::nccl_profiler
