#pragma once
// TensorBoard event files (events.out.tfevents.*): many jobs log their loss only there. This
// module reads them incrementally as the job appends, verifies the CRCs, decodes the scalar
// values and maps their tags onto the vocabulary of the log parsers (parser.h), so a loss read
// from TensorBoard and one read from stdout are the same event.
//
// File format (TensorFlow's TFRecord): a sequence of records, each
//   uint64 length (little-endian) | uint32 masked CRC32C(length bytes) |
//   data[length] | uint32 masked CRC32C(data)
// with mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Each record's data is one
// serialized tensorflow.Event protobuf.
//
// No I/O except FileFollower; no clock. Everything is bounded by the record it reads.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collect/joblog/parsers/parser.h"
#include "core/result.h"

namespace ithbat::collect::joblog::tensorboard {

// Records larger than this are skipped unread (images, graphs, histograms can be MBs; a scalar
// event is tens of bytes). They do not break the framing.
inline constexpr size_t kMaxRecordBytes = 8u << 20;
inline constexpr size_t kMaxScalarsPerEvent = 4096;
inline constexpr size_t kMaxTagBytes = 256;  // longer tags are cut

// CRC32C (Castagnoli), table-driven. Its own copy rather than src/store/crc32c.h: linking the
// store (zstd, the whole storage engine) into this small reader — and into its fuzzer — for
// one checksum is the wrong dependency.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

struct Scalar {
  int64_t step = 0;
  double wall_time = 0;  // seconds since the epoch, as the writer recorded it
  std::string tag;
  double value = 0;
  friend bool operator==(const Scalar&, const Scalar&) = default;
};

// Decodes one record's data (a serialized Event) and returns its scalar values: summary values
// with simple_value (TF1, PyTorch's SummaryWriter, tensorboardX) or with a one-element numeric
// tensor (TF2 tf.summary.scalar: float, double, int32, int64; tensor_content or typed *_val
// fields). Other values (images, histograms, text, multi-element tensors, values whose metadata
// names another plugin) are skipped; events without a summary (file_version, graphs, logs)
// yield no scalars. Errors (kParse): malformed wire data — a truncated varint or field, a
// length past the end, a wrong wire type for a known field. Never reads outside `record`.
Result<std::vector<Scalar>> DecodeEvent(std::string_view record);

// The tag mapped to the log parsers' vocabulary: train loss tags (loss, train/loss,
// train_loss, Loss/train, lm loss, ...) → kLoss "loss"; lr/learning_rate → kTrainMetric "lr";
// grad-norm spellings → "grad_norm"; eval/validation losses → kEvalMetric "eval_loss", other
// eval/val metrics → "eval_<name>"; throughput spellings → "tokens_per_second" /
// "samples_per_second"; anything else → kTrainMetric named by the tag in snake_case (≤64
// bytes). The original tag is kept in attrs ("tag"). nullopt for a tag with no letter or digit.
std::optional<ParsedEvent> ScalarToEvent(const Scalar& scalar);

// Framing of a byte stream into records, incrementally: bytes are appended as they are read,
// complete records come out, a partial record at the end waits for more bytes. A length whose
// CRC fails means the stream can no longer be framed (there is no marker to resynchronise
// on): the reader then stays broken. A data CRC failure skips that one record (its length was
// verified, so the next record's position is known). Not thread-safe.
class RecordReader {
 public:
  enum class Status { kRecord, kNeedMore, kCorruptRecord, kSkippedOversize, kBroken };
  // Appends bytes read from the stream. Memory: the buffered tail is at most one record
  // (≤ kMaxRecordBytes + 16) plus what the caller appends before calling Next.
  void Append(std::string_view bytes);
  // The next record's data into `record` (valid until the next Append/Next), or why not.
  // kSkippedOversize: a record over kMaxRecordBytes is being skipped (its bytes are discarded
  // as they arrive, unchecked). kBroken: see above; error() says where.
  Status Next(std::string_view& record);
  bool broken() const { return broken_; }
  const std::string& error() const { return error_; }
  uint64_t offset() const { return consumed_; }  // stream offset of the next unread byte
  size_t buffered_bytes() const { return buffer_.size() - pos_; }

 private:
  void Compact();
  std::string buffer_;
  size_t pos_ = 0;            // start of the unread part of buffer_
  uint64_t consumed_ = 0;     // stream offset of buffer_[pos_]
  uint64_t skip_bytes_ = 0;   // of an oversize record still to discard
  bool broken_ = false;
  std::string error_;
};

// Follows one event file as a job appends to it. Each Poll reads what was appended since the
// last (at most max_bytes), frames, verifies and decodes it. It follows one inode, the one
// opened: the path is never looked up again (a job controls its paths: it could swap in a
// symlink, a FIFO or a device). A file truncated in place (size below the read offset) is read
// again from offset 0 and counts a restart; a new file under the same name is a new follower
// (the caller finds it). A corrupt length CRC stops the following of this file (kCorrupt error
// from Poll, and broken() is true) until it is truncated; a record whose data CRC fails or
// whose protobuf is malformed is counted in corrupt_records and skipped. The file is read-only
// and never locked, so the writer is not disturbed. Not thread-safe; movable.
class FileFollower {
 public:
  // Opens `path` itself (O_NOFOLLOW: a symlink is refused; O_NONBLOCK: a FIFO cannot hang it).
  // kNotFound when it does not exist, kIo when it cannot be opened, kInvalidArgument when it is
  // not a regular file.
  static Result<FileFollower> Open(std::string path);
  // Follows an already-open descriptor, which it owns from here (closed on error too): the
  // collector opens the job's own open file through /proc/<pid>/fd/<N>. `name` is for
  // messages only. kInvalidArgument when fd is not a regular file, kIo when fstat fails.
  static Result<FileFollower> FromFd(int fd, std::string name);
  FileFollower(FileFollower&& other) noexcept;
  FileFollower& operator=(FileFollower&& other) noexcept;
  FileFollower(const FileFollower&) = delete;
  FileFollower& operator=(const FileFollower&) = delete;
  ~FileFollower();

  // Appends the scalars of the records completed since the last call to `out` and returns the
  // number of bytes read from the file (== max_bytes: more may be waiting, poll again). A file
  // whose path disappeared is still read through the open descriptor (the writer may hold it).
  // Errors: kCorrupt when the file cannot be framed any more (also on every later call until
  // it is truncated); kIo when a read fails. Scalars decoded before the error in
  // the same call are still appended to `out`.
  Result<size_t> Poll(std::vector<Scalar>& out, size_t max_bytes = 4u << 20);

  const std::string& path() const { return path_; }
  bool broken() const { return reader_.broken(); }
  uint64_t records() const { return records_; }
  uint64_t scalars() const { return scalars_; }
  uint64_t corrupt_records() const { return corrupt_records_; }  // data CRC or protobuf errors
  uint64_t oversize_records() const { return oversize_records_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t restarts() const { return restarts_; }  // truncations seen
  dev_t dev() const { return dev_; }
  ino_t ino() const { return ino_; }

 private:
  FileFollower() = default;
  void Close();

  std::string path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  uint64_t offset_ = 0;  // next byte to read from fd_
  RecordReader reader_;
  uint64_t records_ = 0;
  uint64_t scalars_ = 0;
  uint64_t corrupt_records_ = 0;
  uint64_t oversize_records_ = 0;
  uint64_t bytes_read_ = 0;
  uint64_t restarts_ = 0;
};

}  // namespace ithbat::collect::joblog::tensorboard
