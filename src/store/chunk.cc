#include "store/chunk.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "store/decimal.h"

// Bit layout (MSB first within each byte):
//
//   sample 0:  t as 64 raw bits, then a value code
//   sample k:  a timestamp code, then a value code
//
// Timestamp code — dod = (t - t_prev) - (t_prev - t_prev2), zig-zagged; the first delta is
// coded as a dod against 0:
//   '0'                 dod == 0 (a ticker-aligned series)
//   '10'    +  7 bits
//   '110'   + 14 bits
//   '1110'  + 24 bits   (µs..ms of scheduler jitter on nanosecond clocks)
//   '11110' + 40 bits   (a first delta of seconds..minutes)
//   '11111' + 64 bits
//
// Value code (the "previous value" of sample 0 is +0.0):
//   '0'    same IEEE bits as the previous value
//   '10'   + Rice(zig-zag(residual)): the value's mantissa at the current exponent minus a
//          prediction (the previous mantissa, plus the previous mantissa delta when that has
//          been the better guess lately: counters). Rice code with an adaptive parameter k
//          (LOCO-I style: k tracks the mean residual): q = zz >> k as q ones and a '0', then
//          the k low bits; q >= 6 escapes to six ones, 6 bits (bit length - 1) and the bits
//          below the leading one. A delta of a few units costs 2 + 2..4 bits.
//   '110'  + 6 bits (exponent + 15) + 6 bits n + n bits zig-zag(mantissa): a new exponent
//          (the value has no exact form at the current one, or no decimal came before)
//   '111'  + Gorilla XOR against the previous value's bits:
//          '0' + the meaningful bits inside the previous leading/trailing window, or
//          '1' + 5 bits leading zeros + 6 bits (meaningful length - 1) + the meaningful bits
//
// The decimal state (exponent, last mantissa) survives XOR-coded values, so a gauge that
// occasionally reports NaN goes back to cheap deltas right after. All adaptive state is a
// function of the samples already coded, so the decoder mirrors it exactly.
//
// Measured on gen-gpu-node.py data (848 series, 512-sample chunks): about 0.9 bytes/sample.

namespace ithbat::store {
namespace {

constexpr int kExponentBias = 15;  // exponent range [-15, 18] → [0, 33] in 6 bits

inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t UnZigZag(uint64_t u) { return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1)); }

// Wrapping arithmetic: a malformed stream or extreme timestamps must not hit signed overflow.
inline int64_t WrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

inline uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }

struct Bucket {
  int prefix_len;  // number of bits in the prefix code
  uint64_t prefix;
  int width;       // payload bits
};

// Timestamp dod buckets after the '0' code.
constexpr Bucket kTimeBuckets[] = {
    {2, 0b10, 7}, {3, 0b110, 14}, {4, 0b1110, 24}, {5, 0b11110, 40}, {5, 0b11111, 64},
};

constexpr uint64_t kRiceEscape = 6;       // quotients from here on are coded by bit length
constexpr uint64_t kRiceInitSum = 16;     // matches the rice_sum_/rice_n_ initializers
constexpr uint64_t kRiceInitCount = 1;
constexpr uint64_t kRiceWindow = 16;      // halve the running sums at this count: adapt fast
constexpr uint64_t kRiceSumCap = uint64_t{1} << 50;  // keeps sum << k from overflowing
constexpr int kRiceMaxK = 56;
constexpr int kCostShift = 3;             // predictor costs decay by 1/8 per sample

inline int BitLength(uint64_t x) { return 64 - std::countl_zero(x); }

// The smallest k with n << k >= sum: k ~ log2(mean residual).
inline int RiceK(uint64_t sum, uint64_t n) {
  int k = BitLength(sum) - BitLength(n);
  if (k < 0) k = 0;
  while (k > 0 && (n << (k - 1)) >= sum) --k;
  while (k < kRiceMaxK && (n << k) < sum) ++k;
  return k;
}

inline void RiceUpdate(uint64_t zz, uint64_t* sum, uint64_t* n) {
  *sum += zz < kRiceSumCap ? zz : kRiceSumCap;
  if (++*n >= kRiceWindow) {
    *sum >>= 1;
    *n >>= 1;
  }
}

// Chooses between "no change" and "same change as last time" by their recent coding cost.
inline int64_t Prediction(int64_t last_mdelta, int64_t cost_delta, int64_t cost_slope) {
  return cost_slope < cost_delta ? last_mdelta : 0;
}

inline void PredictorUpdate(int64_t delta, int64_t* last_mdelta, int64_t* cost_delta, int64_t* cost_slope) {
  *cost_delta += BitLength(ZigZag(delta)) * 256 - (*cost_delta >> kCostShift);
  *cost_slope += BitLength(ZigZag(WrapSub(delta, *last_mdelta))) * 256 - (*cost_slope >> kCostShift);
  *last_mdelta = delta;
}

inline bool Fits(uint64_t zz, int width) { return width >= 64 || zz < (uint64_t{1} << width); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoder

void ChunkEncoder::Reserve(size_t n_samples) {
  // About 2 bytes a sample plus the raw first timestamp: right for typical GPU series; noisier
  // ones grow the buffer geometrically once and keep it across Clear().
  size_t bits = 128 + n_samples * 16;
  words_.reserve(bits / 64 + 1);
}

void ChunkEncoder::WriteBits(uint64_t value, int nbits) {
  if (nbits <= 0) return;
  if (nbits < 64) value &= (uint64_t{1} << nbits) - 1;
  int used = static_cast<int>(bit_len_ & 63);
  if (used == 0) words_.push_back(0);
  int free = 64 - used;
  if (nbits <= free) {
    words_.back() |= value << (free - nbits);
  } else {
    int spill = nbits - free;  // 1..63
    words_.back() |= value >> spill;
    words_.push_back(value << (64 - spill));
  }
  bit_len_ += static_cast<uint64_t>(nbits);
}

void ChunkEncoder::Append(TimeNs t, double v) {
  // --- timestamp
  if (count_ == 0) {
    WriteBits(static_cast<uint64_t>(t), 64);
    first_t_ = t;
    last_delta_ = 0;
  } else {
    int64_t delta = WrapSub(t, last_t_);
    uint64_t zz = ZigZag(WrapSub(delta, last_delta_));
    if (zz == 0) {
      WriteBits(0, 1);
    } else {
      for (const Bucket& b : kTimeBuckets) {
        if (Fits(zz, b.width)) {
          WriteBits(b.prefix, b.prefix_len);
          WriteBits(zz, b.width);
          break;
        }
      }
    }
    last_delta_ = delta;
  }
  last_t_ = t;

  // --- value
  uint64_t bits = Bits(v);
  uint64_t prev_bits = Bits(last_v_);
  if (bits == prev_bits) {
    WriteBits(0, 1);
    last_mdelta_ = 0;
  } else {
    std::optional<Decimal> at_current;
    if (have_decimal_) at_current = ToDecimalAt(v, exponent_);
    if (at_current) {
      int64_t delta = WrapSub(at_current->mantissa, last_mantissa_);
      int64_t predicted = Prediction(last_mdelta_, cost_delta_, cost_slope_);
      uint64_t zz = ZigZag(WrapSub(delta, predicted));
      WriteBits(0b10, 2);
      int k = RiceK(rice_sum_, rice_n_);
      uint64_t q = zz >> k;
      if (q < kRiceEscape) {
        WriteBits((uint64_t{1} << (q + 1)) - 2, static_cast<int>(q) + 1);  // q ones, a zero
        WriteBits(zz, k);
      } else {
        int n = BitLength(zz);  // >= 1: zz >= kRiceEscape << k
        WriteBits((uint64_t{1} << kRiceEscape) - 1, static_cast<int>(kRiceEscape));
        WriteBits(static_cast<uint64_t>(n - 1), 6);
        WriteBits(zz, n - 1);
      }
      RiceUpdate(zz, &rice_sum_, &rice_n_);
      PredictorUpdate(delta, &last_mdelta_, &cost_delta_, &cost_slope_);
      last_mantissa_ = at_current->mantissa;
    } else if (std::optional<Decimal> d = ToDecimal(v, exponent_)) {
      // Integers with trailing zeros get a positive exponent from ToDecimal; counters and
      // milliwatt readings then flap between exponents. Exponent 0 holds them all.
      if (d->exponent > 0) {
        if (std::optional<Decimal> at_zero = ToDecimalAt(v, 0)) d = at_zero;
      }
      uint64_t zz = ZigZag(d->mantissa);
      int n = 64 - std::countl_zero(zz);  // 0..55
      WriteBits(0b110, 3);
      WriteBits(static_cast<uint64_t>(d->exponent + kExponentBias), 6);
      WriteBits(static_cast<uint64_t>(n), 6);
      WriteBits(zz, n);
      have_decimal_ = true;
      exponent_ = d->exponent;
      last_mantissa_ = d->mantissa;
      last_mdelta_ = 0;
    } else {
      uint64_t x = bits ^ prev_bits;  // non-zero: the bits differ
      int leading = std::countl_zero(x);
      int trailing = std::countr_zero(x);
      if (leading > 31) leading = 31;  // 5 bits
      WriteBits(0b111, 3);
      if (xor_leading_ != 0xff && leading >= xor_leading_ && trailing >= xor_trailing_) {
        int meaningful = 64 - xor_leading_ - xor_trailing_;
        WriteBits(0, 1);
        WriteBits(x >> xor_trailing_, meaningful);
      } else {
        int meaningful = 64 - leading - trailing;  // 1..64
        WriteBits(1, 1);
        WriteBits(static_cast<uint64_t>(leading), 5);
        WriteBits(static_cast<uint64_t>(meaningful - 1), 6);
        WriteBits(x >> trailing, meaningful);
        xor_leading_ = static_cast<uint8_t>(leading);
        xor_trailing_ = static_cast<uint8_t>(trailing);
      }
    }
  }
  last_v_ = v;
  ++count_;
}

std::vector<uint8_t> ChunkEncoder::Bytes() const {
  std::vector<uint8_t> out(size_bytes());
  CopyBytes(out);
  return out;
}

void ChunkEncoder::CopyBytes(std::span<uint8_t> out) const {
  size_t n = std::min(out.size(), size_bytes());
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(words_[i / 8] >> (56 - 8 * (i % 8)));
}

void ChunkEncoder::Clear() {
  words_.clear();  // keeps the capacity: the next chunk appends without allocating
  bit_len_ = 0;
  count_ = 0;
  first_t_ = 0;
  last_t_ = 0;
  last_delta_ = 0;
  last_v_ = 0;
  have_decimal_ = false;
  last_mantissa_ = 0;
  exponent_ = 0;
  xor_leading_ = 0xff;
  xor_trailing_ = 0;
  last_mdelta_ = 0;
  cost_delta_ = 0;
  cost_slope_ = 0;
  rice_sum_ = kRiceInitSum;
  rice_n_ = kRiceInitCount;
}

// ---------------------------------------------------------------------------------------------
// Decoder

ChunkDecoder::ChunkDecoder(std::span<const uint8_t> bytes, size_t count) : bytes_(bytes), count_(count) {}

bool ChunkDecoder::ReadBits(int nbits, uint64_t* out) {
  uint64_t total = static_cast<uint64_t>(bytes_.size()) * 8;
  if (nbits < 0 || nbits > 64 || bit_pos_ + static_cast<uint64_t>(nbits) > total) {
    error_ = true;
    return false;
  }
  if (nbits == 0) {
    *out = 0;
    return true;
  }
  size_t byte = static_cast<size_t>(bit_pos_ >> 3);
  int offset = static_cast<int>(bit_pos_ & 7);
  size_t avail = bytes_.size() - byte;
  uint64_t window = 0;  // the next 8 bytes, big-endian, zero-padded past the end
  if (avail >= 8) {
    std::memcpy(&window, bytes_.data() + byte, 8);
    if constexpr (std::endian::native == std::endian::little) window = __builtin_bswap64(window);
  } else {
    for (size_t i = 0; i < avail; ++i) window |= static_cast<uint64_t>(bytes_[byte + i]) << (56 - 8 * i);
  }
  uint64_t value = (window << offset) >> (64 - nbits);
  int spill = offset + nbits - 64;  // bits that lie in the 9th byte
  if (spill > 0) value |= static_cast<uint64_t>(bytes_[byte + 8]) >> (8 - spill);
  bit_pos_ += static_cast<uint64_t>(nbits);
  *out = value;
  return true;
}

bool ChunkDecoder::Next(Sample* out) {
  if (error_ || index_ >= count_) return false;
  uint64_t bit = 0;

  // --- timestamp
  TimeNs t;
  if (index_ == 0) {
    uint64_t raw;
    if (!ReadBits(64, &raw)) return false;
    t = static_cast<TimeNs>(raw);
    last_delta_ = 0;
  } else {
    if (!ReadBits(1, &bit)) return false;
    int64_t dod = 0;
    if (bit != 0) {
      // Count the ones of the prefix (at most 4 after the first).
      int ones = 1;
      while (ones < 5) {
        if (!ReadBits(1, &bit)) return false;
        if (bit == 0) break;
        ++ones;
      }
      // ones: 1 → '10', 2 → '110', 3 → '1110', 4 → '11110', 5 → '11111'
      uint64_t zz;
      if (!ReadBits(kTimeBuckets[ones - 1].width, &zz)) return false;
      dod = UnZigZag(zz);
    }
    int64_t delta = WrapAdd(last_delta_, dod);
    t = WrapAdd(last_t_, delta);
    last_delta_ = delta;
  }

  // --- value
  double v = last_v_;
  if (!ReadBits(1, &bit)) return false;
  if (bit == 0) {
    last_mdelta_ = 0;
  } else {
    if (!ReadBits(1, &bit)) return false;
    if (bit == 0) {  // '10': mantissa delta
      if (!have_decimal_) {
        error_ = true;
        return false;
      }
      int k = RiceK(rice_sum_, rice_n_);
      uint64_t q = 0;
      while (q < kRiceEscape) {
        if (!ReadBits(1, &bit)) return false;
        if (bit == 0) break;
        ++q;
      }
      uint64_t zz;
      if (q < kRiceEscape) {
        uint64_t low;
        if (!ReadBits(k, &low)) return false;
        zz = (q << k) | low;
      } else {
        uint64_t n_minus_1, low;
        if (!ReadBits(6, &n_minus_1) || !ReadBits(static_cast<int>(n_minus_1), &low)) return false;
        zz = (uint64_t{1} << n_minus_1) | low;
      }
      RiceUpdate(zz, &rice_sum_, &rice_n_);
      int64_t delta = WrapAdd(UnZigZag(zz), Prediction(last_mdelta_, cost_delta_, cost_slope_));
      PredictorUpdate(delta, &last_mdelta_, &cost_delta_, &cost_slope_);
      last_mantissa_ = WrapAdd(last_mantissa_, delta);
      v = FromDecimal(Decimal{last_mantissa_, exponent_});
    } else {
      if (!ReadBits(1, &bit)) return false;
      if (bit == 0) {  // '110': new exponent + full mantissa
        uint64_t e, n, zz;
        if (!ReadBits(6, &e) || !ReadBits(6, &n)) return false;
        if (e > static_cast<uint64_t>(18 + kExponentBias) || n > 64) {
          error_ = true;
          return false;
        }
        if (!ReadBits(static_cast<int>(n), &zz)) return false;
        have_decimal_ = true;
        exponent_ = static_cast<int8_t>(static_cast<int>(e) - kExponentBias);
        last_mantissa_ = UnZigZag(zz);
        last_mdelta_ = 0;
        v = FromDecimal(Decimal{last_mantissa_, exponent_});
      } else {  // '111': XOR
        if (!ReadBits(1, &bit)) return false;
        uint64_t x;
        if (bit == 0) {
          if (xor_leading_ == 0xff) {
            error_ = true;
            return false;
          }
          int meaningful = 64 - xor_leading_ - xor_trailing_;
          uint64_t m;
          if (!ReadBits(meaningful, &m)) return false;
          x = m << xor_trailing_;
        } else {
          uint64_t leading, len_minus_1, m;
          if (!ReadBits(5, &leading) || !ReadBits(6, &len_minus_1)) return false;
          int meaningful = static_cast<int>(len_minus_1) + 1;
          int trailing = 64 - static_cast<int>(leading) - meaningful;
          if (trailing < 0) {
            error_ = true;
            return false;
          }
          if (!ReadBits(meaningful, &m)) return false;
          x = trailing >= 64 ? 0 : m << trailing;
          xor_leading_ = static_cast<uint8_t>(leading);
          xor_trailing_ = static_cast<uint8_t>(trailing);
        }
        v = std::bit_cast<double>(Bits(last_v_) ^ x);
      }
    }
  }
  last_t_ = t;
  last_v_ = v;
  ++index_;
  out->t = t;
  out->v = v;
  return true;
}

std::vector<Sample> DecodeChunk(std::span<const uint8_t> bytes, size_t count) {
  std::vector<Sample> out;
  // A malformed count must not reserve gigabytes: a sample takes at least 2 bits.
  size_t bound = bytes.size() * 4 + 1;
  out.reserve(count < bound ? count : bound);
  ChunkDecoder dec(bytes, count);
  Sample s;
  while (dec.Next(&s)) out.push_back(s);
  return out;
}

}  // namespace ithbat::store
