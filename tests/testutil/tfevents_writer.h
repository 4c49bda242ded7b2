#pragma once
// Writes TensorBoard event files (events.out.tfevents.*) for tests and for the
// ithbat-tfevents-writer child program (sim/tools). Deliberately independent of the reader in
// src/collect/joblog/tensorboard: its own protobuf encoding and a bitwise (not table-driven)
// CRC32C, so a test that round-trips through both checks one implementation against another.
// Standard library and POSIX only (the sim program links it without GoogleTest).
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace ithbat::testing {

// CRC32C, bit by bit; and TFRecord's masked form.
uint32_t Crc32cBitwise(std::string_view data);
uint32_t MaskedCrc32c(std::string_view data);
// length | masked CRC(length) | data | masked CRC(data).
std::string TfRecord(std::string_view data);

// How a scalar is stored: PyTorch SummaryWriter / tensorboardX / TF1 write simple_value; TF2's
// tf.summary.scalar writes a rank-0 DT_FLOAT tensor (tensor_content) with "scalars" plugin
// metadata on a tag's first value.
enum class ScalarStyle { kSimpleValue, kTensor };

// Serialized Event messages (no framing).
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarEvent(int64_t step, double wall_time, std::string_view tag, float value, ScalarStyle style,
                              bool with_metadata);

// Appends framed events to a file with plain write(2) calls (as a job's writer does).
class TfEventsWriter {
 public:
  // Opens (creating, appending) `path`; ok() says whether that worked.
  explicit TfEventsWriter(const std::string& path);
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;
  bool ok() const { return fd_ >= 0; }

  bool WriteFileVersion(double wall_time);
  bool WriteScalar(int64_t step, std::string_view tag, float value, double wall_time,
                   ScalarStyle style = ScalarStyle::kSimpleValue);
  bool WriteRaw(std::string_view bytes);  // anything (torn or corrupt records in tests)

 private:
  int fd_ = -1;
  std::set<std::string, std::less<>> tags_with_metadata_;
};

}  // namespace ithbat::testing
