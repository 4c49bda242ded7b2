#pragma once
// The body of a segment file (before zstd): samples in a columnar block codec, events and step
// records in a compact versioned binary form. Private to src/store (disk.cc and its tests; the
// event log packs the events it holds in memory with the same Writer and Reader);
// the byte layout is documented in docs/storage.md.
//
// Decoding treats its input as untrusted: every count and length is checked against the bytes
// that remain, and malformed input is a kParse/kCorrupt error, never a crash.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "store/disk.h"

namespace ithbat::store::codec {

// Little-endian fixed-width integers, LEB128 varints and zig-zag signed varints.
class Writer {
 public:
  void PutU8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void PutU32(uint32_t v);
  void PutU64(uint64_t v);
  void PutVarint(uint64_t v);
  void PutZigZag(int64_t v) { PutVarint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void PutBytes(std::string_view b) { buf_.append(b); }
  void PutString(std::string_view s) {
    PutVarint(s.size());
    buf_.append(s);
  }
  std::string& buffer() { return buf_; }
  const std::string& data() const { return buf_; }
  size_t size() const { return buf_.size(); }

 private:
  std::string buf_;
};

// Reads from a view it does not own. A failed read sets ok() to false and returns zeros; the
// caller checks ok() once after a group of reads.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint8_t GetU8();
  uint32_t GetU32();
  uint64_t GetU64();
  uint64_t GetVarint();
  int64_t GetZigZag() {
    uint64_t v = GetVarint();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  std::string_view GetBytes(size_t n);
  // A length-prefixed string of at most max_bytes.
  std::string_view GetString(size_t max_bytes = 1 << 20);
  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }
  bool ok() const { return ok_; }
  void Fail() { ok_ = false; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

inline constexpr uint8_t kBodyVersion = 1;

// The whole (uncompressed) body of a segment. Series are written in ref order; a ref that
// appears twice stays two batches.
std::string EncodeBody(const SegmentContents& contents);
Status DecodeBody(std::string_view body, SegmentContents* out);

// The parts, exposed for tests and the size measurements.
void EncodeSamples(const std::vector<SeriesBatch>& series, Writer* w);
Status DecodeSamples(Reader* r, std::vector<SeriesBatch>* out);
void EncodeEvents(const std::vector<Event>& events, Writer* w);
Status DecodeEvents(Reader* r, std::vector<Event>* out);
void EncodeSteps(const std::vector<StepRecord>& steps, Writer* w);
Status DecodeSteps(Reader* r, std::vector<StepRecord>* out);

// A series-table record (the payload that series.log frames with length and CRC).
std::string EncodeSeriesDefinition(const SeriesDefinition& def);
Status DecodeSeriesDefinition(std::string_view payload, SeriesDefinition* out);

}  // namespace ithbat::store::codec
