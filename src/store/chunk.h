#pragma once
// The in-memory codec: one series' samples packed into a bit stream as they arrive.
//  - time: delta-of-delta (Gorilla); a ticker-aligned series costs 1 bit per timestamp.
//  - value: '0' = same bits as the previous value; otherwise the decimal form (decimal.h) as a
//    zig-zag delta of mantissas at the current exponent, or a new exponent, or — for NaN, ±Inf
//    and values with no short decimal form — Gorilla's XOR of the IEEE bits.
// Appending never allocates once the encoder's buffer is reserved (Reserve); Seal() returns
// the exact-size bytes. Decoding is a forward iterator over a byte span.
#include <cstdint>
#include <span>
#include <vector>

#include "core/time.h"

namespace ithbat::store {

struct Sample {
  TimeNs t = 0;
  double v = 0;
};

class ChunkEncoder {
 public:
  ChunkEncoder() = default;
  // Preallocates room for about n samples so that Append does not allocate.
  void Reserve(size_t n_samples);
  // The caller guarantees t is strictly greater than the previous t (the store checks order).
  void Append(TimeNs t, double v);
  size_t count() const { return count_; }
  TimeNs first_time() const { return first_t_; }
  TimeNs last_time() const { return last_t_; }
  double last_value() const { return last_v_; }
  size_t size_bytes() const { return (bit_len_ + 7) / 8; }
  size_t capacity_bytes() const { return words_.capacity() * sizeof(uint64_t); }
  // The encoded bytes so far (a copy, exact size); the encoder stays usable.
  std::vector<uint8_t> Bytes() const;
  // The same into caller-owned memory of at least size_bytes() (sealing without a temporary).
  void CopyBytes(std::span<uint8_t> out) const;
  void Clear();

 private:
  void WriteBits(uint64_t value, int nbits);

  std::vector<uint64_t> words_;
  uint64_t bit_len_ = 0;
  size_t count_ = 0;
  TimeNs first_t_ = 0;
  TimeNs last_t_ = 0;
  int64_t last_delta_ = 0;
  double last_v_ = 0;
  // value-coder state
  bool have_decimal_ = false;
  int64_t last_mantissa_ = 0;
  int8_t exponent_ = 0;
  uint8_t xor_leading_ = 0xff;  // Gorilla window: 0xff = no window yet
  uint8_t xor_trailing_ = 0;
  // Mantissa predictor and residual coder state (see chunk.cc), mirrored by the decoder.
  int64_t last_mdelta_ = 0;
  int64_t cost_delta_ = 0;
  int64_t cost_slope_ = 0;
  uint64_t rice_sum_ = 16;  // adaptive Rice parameter: running sum and count of residuals
  uint64_t rice_n_ = 1;
};

// Iterates the samples of an encoded chunk. The bytes must outlive the decoder.
class ChunkDecoder {
 public:
  ChunkDecoder(std::span<const uint8_t> bytes, size_t count);
  // Next sample, or false at the end. A stream that ends early or is malformed stops the
  // iteration and sets error().
  bool Next(Sample* out);
  bool error() const { return error_; }

 private:
  bool ReadBits(int nbits, uint64_t* out);

  std::span<const uint8_t> bytes_;
  size_t count_;
  size_t index_ = 0;
  uint64_t bit_pos_ = 0;
  bool error_ = false;
  TimeNs last_t_ = 0;
  int64_t last_delta_ = 0;
  double last_v_ = 0;
  bool have_decimal_ = false;
  int64_t last_mantissa_ = 0;
  int8_t exponent_ = 0;
  uint8_t xor_leading_ = 0xff;
  uint8_t xor_trailing_ = 0;
  int64_t last_mdelta_ = 0;
  int64_t cost_delta_ = 0;
  int64_t cost_slope_ = 0;
  uint64_t rice_sum_ = 16;  // adaptive Rice parameter: running sum and count of residuals
  uint64_t rice_n_ = 1;
};

// Decodes a whole chunk (helper for tests and cold paths).
std::vector<Sample> DecodeChunk(std::span<const uint8_t> bytes, size_t count);

}  // namespace ithbat::store
