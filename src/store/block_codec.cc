#include "store/block_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "store/decimal.h"

namespace ithbat::store::codec {
namespace {

constexpr int64_t kMaxMantissa = int64_t{1} << 53;
constexpr uint8_t kSectionSamples = 1;
constexpr uint8_t kSectionEvents = 2;
constexpr uint8_t kSectionSteps = 3;
constexpr uint8_t kSeriesRecordVersion = 1;

// Value modes of one series' mantissa stream.
constexpr uint8_t kModeDelta = 0;     // m_i - m_{i-1}: gauges that wander
constexpr uint8_t kModeDod = 1;       // (m_i - m_{i-1}) - (m_{i-1} - m_{i-2}): counters
constexpr uint8_t kModeConstant = 2;  // every decimal sample equals the first: nothing stored
constexpr uint8_t kModeValue = 3;     // m_i - m_0: noise around a level (a delta doubles noise)
constexpr uint8_t kMaxMode = kModeValue;

// Wrapping arithmetic: corrupt or extreme inputs must not be undefined behaviour, and encoder
// and decoder wrap the same way, so any int64 round-trips.
inline int64_t WrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
// Rough cost of a zig-zag value after entropy coding: its significant bits.
inline uint64_t CostBits(int64_t v) { return std::bit_width(ZigZag(v)) + 1; }

constexpr int64_t kPow10i[] = {1,
                               10,
                               100,
                               1000,
                               10000,
                               100000,
                               1000000,
                               10000000,
                               100000000,
                               1000000000,
                               10000000000,
                               100000000000,
                               1000000000000,
                               10000000000000,
                               100000000000000,
                               1000000000000000,
                               10000000000000000,
                               100000000000000000,
                               1000000000000000000};

void PutStream(Writer* w, const Writer& stream) {
  w->PutVarint(stream.size());
  w->PutBytes(stream.data());
}

Reader GetStream(Reader* r) {
  uint64_t n = r->GetVarint();
  if (n > r->remaining()) {
    r->Fail();
    return Reader(std::string_view());
  }
  return Reader(r->GetBytes(n));
}

Status Corrupt(std::string_view what) { return MakeErrorF(ErrorCode::kCorrupt, "segment body: {}", what); }

// One series' values, split into decimal mantissas at one exponent and raw exceptions.
struct SplitValues {
  int8_t exponent = 0;
  std::vector<int64_t> mantissas;
  std::vector<uint32_t> raw_index;  // sample indices stored as raw IEEE bits
  std::vector<uint64_t> raw_bits;
};

// The exponent is the smallest one any value needs, so that a series whose values have
// varying digit counts (98, 98.5) keeps one exponent and small mantissa deltas; values that
// would overflow the mantissa at that exponent, and NaN/±Inf/-0.0, go raw.
void Split(const std::vector<Sample>& samples, SplitValues* out) {
  std::vector<Decimal> decs(samples.size());
  std::vector<bool> is_dec(samples.size());
  int8_t hint = 0;
  int exponent = std::numeric_limits<int>::max();
  for (size_t i = 0; i < samples.size(); ++i) {
    auto d = ToDecimal(samples[i].v, hint);
    if (d) {
      decs[i] = *d;
      is_dec[i] = true;
      hint = d->exponent;
      exponent = std::min<int>(exponent, d->exponent);
    }
  }
  if (exponent == std::numeric_limits<int>::max()) exponent = 0;
  out->exponent = static_cast<int8_t>(exponent);
  out->mantissas.reserve(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    uint64_t bits = std::bit_cast<uint64_t>(samples[i].v);
    if (is_dec[i]) {
      int shift = decs[i].exponent - exponent;  // >= 0
      int64_t m = 0;
      if (shift <= 18 && !__builtin_mul_overflow(decs[i].mantissa, kPow10i[shift], &m) && m < kMaxMantissa &&
          m > -kMaxMantissa &&
          std::bit_cast<uint64_t>(FromDecimal(Decimal{m, static_cast<int8_t>(exponent)})) == bits) {
        out->mantissas.push_back(m);
        continue;
      }
    }
    out->raw_index.push_back(static_cast<uint32_t>(i));
    out->raw_bits.push_back(bits);
  }
}

}  // namespace

void Writer::PutU32(uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  buf_.append(b, 4);
}

void Writer::PutU64(uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  buf_.append(b, 8);
}

void Writer::PutVarint(uint64_t v) {
  while (v >= 0x80) {
    buf_.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  buf_.push_back(static_cast<char>(v));
}

uint8_t Reader::GetU8() {
  if (!ok_ || pos_ >= data_.size()) {
    ok_ = false;
    return 0;
  }
  return static_cast<uint8_t>(data_[pos_++]);
}

uint32_t Reader::GetU32() {
  if (!ok_ || remaining() < 4) {
    ok_ = false;
    return 0;
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}

uint64_t Reader::GetU64() {
  if (!ok_ || remaining() < 8) {
    ok_ = false;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

uint64_t Reader::GetVarint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (!ok_ || pos_ >= data_.size()) {
      ok_ = false;
      return 0;
    }
    uint8_t b = static_cast<uint8_t>(data_[pos_++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
  ok_ = false;  // more than 10 bytes
  return 0;
}

std::string_view Reader::GetBytes(size_t n) {
  if (!ok_ || remaining() < n) {
    ok_ = false;
    return {};
  }
  std::string_view v = data_.substr(pos_, n);
  pos_ += n;
  return v;
}

std::string_view Reader::GetString(size_t max_bytes) {
  uint64_t n = GetVarint();
  if (n > max_bytes) {
    ok_ = false;
    return {};
  }
  return GetBytes(n);
}

// ---- samples -------------------------------------------------------------------------------

void EncodeSamples(const std::vector<SeriesBatch>& series, Writer* w) {
  std::vector<const SeriesBatch*> order;
  order.reserve(series.size());
  for (const auto& s : series) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->ref < b->ref; });

  TimeNs base = 0;
  bool have_base = false;
  for (const auto* s : order) {
    if (!s->samples.empty() && (!have_base || s->samples.front().t < base)) {
      base = s->samples.front().t;
      have_base = true;
    }
  }

  Writer refs, counts, thead, tdod, vhead, mant, rawidx, raw;
  SeriesRef prev_ref = 0;
  SplitValues split;
  std::vector<uint64_t> residuals;
  for (const auto* s : order) {
    refs.PutZigZag(static_cast<int64_t>(s->ref) - static_cast<int64_t>(prev_ref));
    prev_ref = s->ref;
    const auto& smp = s->samples;
    counts.PutVarint(smp.size());
    if (smp.empty()) continue;

    // Timestamps: first as an offset from the segment base, then the first delta, then
    // delta-of-delta (0 for a ticker-aligned series).
    thead.PutZigZag(WrapSub(smp[0].t, base));
    if (smp.size() >= 2) thead.PutZigZag(WrapSub(smp[1].t, smp[0].t));
    for (size_t i = 2; i < smp.size(); ++i) {
      tdod.PutZigZag(WrapSub(WrapSub(smp[i].t, smp[i - 1].t), WrapSub(smp[i - 1].t, smp[i - 2].t)));
    }

    // Values.
    split = SplitValues{};
    Split(smp, &split);
    const auto& m = split.mantissas;
    // The predictor whose residuals need the fewest significant bits.
    uint64_t cost[3] = {0, 0, 0};  // delta, dod, value
    bool constant = true;
    for (size_t i = 1; i < m.size(); ++i) {
      int64_t d = WrapSub(m[i], m[i - 1]);
      if (d != 0) constant = false;
      cost[0] += CostBits(d);
      cost[1] += CostBits(i == 1 ? d : WrapSub(d, WrapSub(m[i - 1], m[i - 2])));
      cost[2] += CostBits(WrapSub(m[i], m[0]));
    }
    uint8_t mode = kModeConstant;
    if (!constant) {
      mode = kModeDelta;
      if (cost[1] < cost[0]) mode = kModeDod;
      if (cost[2] < std::min(cost[0], cost[1])) mode = kModeValue;
    }
    vhead.PutU8(mode);
    vhead.PutZigZag(split.exponent);
    vhead.PutVarint(split.raw_index.size());
    if (!m.empty()) vhead.PutZigZag(m[0]);
    if (mode != kModeConstant) {
      residuals.clear();
      uint64_t all_bits = 0;
      for (size_t i = 1; i < m.size(); ++i) {
        int64_t d = WrapSub(m[i], m[i - 1]);
        int64_t r = mode == kModeDelta   ? d
                    : mode == kModeValue ? WrapSub(m[i], m[0])
                    : i == 1             ? d
                                         : WrapSub(d, WrapSub(m[i - 1], m[i - 2]));
        residuals.push_back(static_cast<uint64_t>(r));
      }
      // Residuals that share a factor (a counter of 2 MiB pages, a clock in 15 MHz steps, a
      // value printed with more digits than it has) are stored divided by it.
      uint64_t g = 0;
      for (uint64_t r : residuals) {
        uint64_t a = static_cast<int64_t>(r) < 0 ? ~r + 1 : r;
        g = std::gcd(g, a);
        if (g == 1) break;
      }
      if (g == 0 || g > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) g = 1;
      for (uint64_t& r : residuals) {
        r = ZigZag(static_cast<int64_t>(r) / static_cast<int64_t>(g));
        all_bits |= r;
      }
      // Fixed-width residuals cut into byte planes (all low bytes, then all next bytes, ...):
      // each plane has its own narrow distribution that zstd's entropy stage codes close to
      // its entropy, where varints would mix length bits into every byte.
      int width = (std::bit_width(all_bits) + 7) / 8;
      vhead.PutVarint(g);
      vhead.PutU8(static_cast<uint8_t>(width));
      for (int p = 0; p < width; ++p) {
        for (uint64_t r : residuals) mant.PutU8(static_cast<uint8_t>(r >> (8 * p)));
      }
    }
    uint32_t next = 0;
    for (size_t i = 0; i < split.raw_index.size(); ++i) {
      rawidx.PutVarint(split.raw_index[i] - next);
      next = split.raw_index[i] + 1;
      raw.PutU64(split.raw_bits[i]);
    }
  }

  w->PutVarint(order.size());
  w->PutZigZag(base);
  // Similar streams side by side: zstd sees long runs of like bytes (all timestamps' zeros,
  // all small mantissa deltas) instead of an interleaving that breaks its matches.
  for (const Writer* st : {&refs, &counts, &thead, &tdod, &vhead, &mant, &rawidx, &raw}) PutStream(w, *st);
}

Status DecodeSamples(Reader* r, std::vector<SeriesBatch>* out) {
  uint64_t n_series = r->GetVarint();
  TimeNs base = r->GetZigZag();
  Reader refs = GetStream(r), counts = GetStream(r), thead = GetStream(r), tdod = GetStream(r),
         vhead = GetStream(r), mant = GetStream(r), rawidx = GetStream(r), raw = GetStream(r);
  if (!r->ok()) return Corrupt("truncated sample streams");
  // Each series costs at least one byte in `counts`: this bounds the allocation.
  if (n_series > counts.remaining()) return Corrupt("series count beyond its stream");
  out->reserve(out->size() + n_series);
  SeriesRef ref = 0;
  std::vector<uint64_t> residuals;
  for (uint64_t k = 0; k < n_series; ++k) {
    int64_t ref_delta = refs.GetZigZag();
    int64_t next_ref = static_cast<int64_t>(ref) + ref_delta;
    if (!refs.ok() || next_ref < 0 || next_ref > std::numeric_limits<SeriesRef>::max()) {
      return Corrupt("bad series ref");
    }
    ref = static_cast<SeriesRef>(next_ref);
    uint64_t count = counts.GetVarint();
    if (!counts.ok()) return Corrupt("bad sample count");
    SeriesBatch batch;
    batch.ref = ref;
    if (count == 0) {
      out->push_back(std::move(batch));
      continue;
    }
    // Every sample past the second has a byte in `tdod`: a count beyond that is corrupt, and
    // the check keeps a hostile count from allocating.
    if (count > 2 && count - 2 > tdod.remaining()) return Corrupt("sample count beyond its stream");
    if (count > std::numeric_limits<uint32_t>::max()) return Corrupt("sample count too large");
    batch.samples.resize(count);
    auto& smp = batch.samples;
    smp[0].t = WrapAdd(base, thead.GetZigZag());
    int64_t delta = 0;
    if (count >= 2) {
      delta = thead.GetZigZag();
      smp[1].t = WrapAdd(smp[0].t, delta);
    }
    for (size_t i = 2; i < count; ++i) {
      delta = WrapAdd(delta, tdod.GetZigZag());
      smp[i].t = WrapAdd(smp[i - 1].t, delta);
    }
    if (!thead.ok() || !tdod.ok()) return Corrupt("truncated timestamps");

    uint8_t mode = vhead.GetU8();
    int64_t exponent = vhead.GetZigZag();
    uint64_t n_raw = vhead.GetVarint();
    if (!vhead.ok() || mode > kMaxMode || exponent < -kMaxDecimalDigits || exponent > 18 || n_raw > count) {
      return Corrupt("bad value header");
    }
    if (n_raw * 8 > raw.remaining()) return Corrupt("raw values beyond their stream");
    uint64_t n_dec = count - n_raw;
    int64_t m0 = n_dec > 0 ? vhead.GetZigZag() : 0;
    if (!vhead.ok()) return Corrupt("bad value header");
    residuals.assign(n_dec > 1 && mode != kModeConstant ? n_dec - 1 : 0, 0);
    uint64_t scale = 1;
    if (mode != kModeConstant) {
      scale = vhead.GetVarint();
      uint8_t width = vhead.GetU8();
      if (!vhead.ok() || width > 8) return Corrupt("bad residual width");
      if (residuals.size() * width > mant.remaining()) return Corrupt("mantissas beyond their stream");
      for (int p = 0; p < width; ++p) {
        std::string_view plane = mant.GetBytes(residuals.size());
        for (size_t i = 0; i < residuals.size(); ++i) {
          residuals[i] |= static_cast<uint64_t>(static_cast<uint8_t>(plane[i])) << (8 * p);
        }
      }
    }
    // Raw positions first, then the decimals fill the rest in order.
    std::vector<bool> is_raw(count, false);
    uint64_t pos = 0;
    for (uint64_t j = 0; j < n_raw; ++j) {
      pos += rawidx.GetVarint();
      if (!rawidx.ok() || pos >= count || is_raw[pos]) return Corrupt("bad raw value index");
      is_raw[pos] = true;
      smp[pos].v = std::bit_cast<double>(raw.GetU64());
      ++pos;
    }
    int64_t m = m0, d = 0;
    uint64_t seen = 0;
    for (size_t i = 0; i < count; ++i) {
      if (is_raw[i]) continue;
      if (seen > 0 && mode != kModeConstant) {
        uint64_t zz = residuals[seen - 1];
        int64_t r = static_cast<int64_t>(((zz >> 1) ^ (~(zz & 1) + 1)) * scale);
        if (mode == kModeDelta) {
          m = WrapAdd(m, r);
        } else if (mode == kModeValue) {
          m = WrapAdd(m0, r);
        } else {
          d = seen == 1 ? r : WrapAdd(d, r);
          m = WrapAdd(m, d);
        }
      }
      ++seen;
      smp[i].v = FromDecimal(Decimal{m, static_cast<int8_t>(exponent)});
    }
    if (!mant.ok() || !raw.ok()) return Corrupt("truncated values");
    out->push_back(std::move(batch));
  }
  if (!refs.ok() || !vhead.ok()) return Corrupt("truncated series headers");
  return Ok();
}

// ---- events and steps ----------------------------------------------------------------------

void EncodeEvents(const std::vector<Event>& events, Writer* w) {
  w->PutVarint(events.size());
  TimeNs prev = 0;
  for (const Event& e : events) {
    w->PutZigZag(WrapSub(e.time, prev));
    prev = e.time;
    w->PutU8(static_cast<uint8_t>(e.kind));
    const Identity& id = e.identity;
    w->PutString(id.cluster);
    w->PutString(id.node);
    w->PutString(id.job);
    w->PutZigZag(id.rank);
    w->PutZigZag(id.local_rank);
    w->PutZigZag(id.world_size);
    w->PutZigZag(id.pid);
    w->PutZigZag(id.gpu_index);
    w->PutString(id.gpu_uuid);
    w->PutString(e.source);
    w->PutZigZag(e.step);
    w->PutU64(std::bit_cast<uint64_t>(e.value));
    w->PutString(e.name);
    w->PutString(e.text);
    w->PutVarint(e.attrs.size());
    for (const auto& [k, v] : e.attrs) {
      w->PutString(k);
      w->PutString(v);
    }
  }
}

namespace {
bool GetInt32(Reader* r, int32_t* out) {
  int64_t v = r->GetZigZag();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    r->Fail();
    return false;
  }
  *out = static_cast<int32_t>(v);
  return true;
}
}  // namespace

Status DecodeEvents(Reader* r, std::vector<Event>* out) {
  uint64_t n = r->GetVarint();
  // An event takes at least 25 bytes: the bound keeps a hostile count from allocating.
  if (!r->ok() || n > r->remaining() / 25) return Corrupt("bad event count");
  out->reserve(out->size() + n);
  TimeNs prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    Event e;
    e.time = WrapAdd(prev, r->GetZigZag());
    prev = e.time;
    uint8_t kind = r->GetU8();
    if (kind >= kEventKindCount) return Corrupt("unknown event kind");
    e.kind = static_cast<EventKind>(kind);
    e.identity.cluster = r->GetString();
    e.identity.node = r->GetString();
    e.identity.job = r->GetString();
    GetInt32(r, &e.identity.rank);
    GetInt32(r, &e.identity.local_rank);
    GetInt32(r, &e.identity.world_size);
    GetInt32(r, &e.identity.pid);
    GetInt32(r, &e.identity.gpu_index);
    e.identity.gpu_uuid = r->GetString();
    e.source = r->GetString();
    e.step = r->GetZigZag();
    e.value = std::bit_cast<double>(r->GetU64());
    e.name = r->GetString();
    e.text = r->GetString();
    uint64_t n_attrs = r->GetVarint();
    if (!r->ok() || n_attrs > r->remaining() / 2) return Corrupt("bad event attributes");
    e.attrs.reserve(n_attrs);
    for (uint64_t a = 0; a < n_attrs; ++a) {
      std::string k(r->GetString());
      std::string v(r->GetString());
      e.attrs.emplace_back(std::move(k), std::move(v));
    }
    if (!r->ok()) return Corrupt("truncated event");
    out->push_back(std::move(e));
  }
  return Ok();
}

void EncodeSteps(const std::vector<StepRecord>& steps, Writer* w) {
  w->PutVarint(steps.size());
  TimeNs prev_start = 0;
  int64_t prev_step = 0;
  for (const StepRecord& s : steps) {
    w->PutString(s.job);
    w->PutZigZag(s.rank);
    w->PutZigZag(WrapSub(s.span.step, prev_step));
    w->PutZigZag(WrapSub(s.span.start, prev_start));
    w->PutZigZag(WrapSub(s.span.end, s.span.start));
    prev_step = s.span.step;
    prev_start = s.span.start;
  }
}

Status DecodeSteps(Reader* r, std::vector<StepRecord>* out) {
  uint64_t n = r->GetVarint();
  if (!r->ok() || n > r->remaining() / 5) return Corrupt("bad step count");
  out->reserve(out->size() + n);
  TimeNs prev_start = 0;
  int64_t prev_step = 0;
  for (uint64_t i = 0; i < n; ++i) {
    StepRecord s;
    s.job = r->GetString();
    GetInt32(r, &s.rank);
    s.span.step = WrapAdd(prev_step, r->GetZigZag());
    s.span.start = WrapAdd(prev_start, r->GetZigZag());
    s.span.end = WrapAdd(s.span.start, r->GetZigZag());
    if (!r->ok()) return Corrupt("truncated step record");
    prev_step = s.span.step;
    prev_start = s.span.start;
    out->push_back(std::move(s));
  }
  return Ok();
}

// ---- body ----------------------------------------------------------------------------------

std::string EncodeBody(const SegmentContents& contents) {
  Writer w;
  w.PutU8(kBodyVersion);
  auto section = [&w](uint8_t id, const Writer& part) {
    w.PutU8(id);
    PutStream(&w, part);
  };
  if (!contents.series.empty()) {
    Writer part;
    EncodeSamples(contents.series, &part);
    section(kSectionSamples, part);
  }
  if (!contents.events.empty()) {
    Writer part;
    EncodeEvents(contents.events, &part);
    section(kSectionEvents, part);
  }
  if (!contents.steps.empty()) {
    Writer part;
    EncodeSteps(contents.steps, &part);
    section(kSectionSteps, part);
  }
  return std::move(w.buffer());
}

Status DecodeBody(std::string_view body, SegmentContents* out) {
  Reader r(body);
  uint8_t version = r.GetU8();
  if (!r.ok() || version != kBodyVersion)
    return MakeErrorF(ErrorCode::kParse, "segment body version {}", version);
  while (r.remaining() > 0) {
    uint8_t id = r.GetU8();
    Reader part = GetStream(&r);
    if (!r.ok()) return Corrupt("truncated section");
    Status st;
    switch (id) {
      case kSectionSamples:
        st = DecodeSamples(&part, &out->series);
        break;
      case kSectionEvents:
        st = DecodeEvents(&part, &out->events);
        break;
      case kSectionSteps:
        st = DecodeSteps(&part, &out->steps);
        break;
      default:
        break;  // a section a later writer added: skipped, its length is known
    }
    if (!st) return st;
  }
  return Ok();
}

// ---- series table records ------------------------------------------------------------------

std::string EncodeSeriesDefinition(const SeriesDefinition& def) {
  Writer w;
  w.PutU8(kSeriesRecordVersion);
  w.PutVarint(def.ref);
  w.PutString(def.desc.name);
  w.PutString(def.desc.help);
  w.PutString(def.desc.unit);
  w.PutU8(def.desc.type == MetricType::kCounter ? 1 : 0);
  w.PutVarint(def.desc.label_names.size());
  for (const auto& n : def.desc.label_names) w.PutString(n);
  w.PutVarint(def.labels.size());
  for (size_t i = 0; i < def.labels.size(); ++i) {
    w.PutString(def.labels.NameAt(i));
    w.PutString(def.labels.ValueAt(i));
  }
  return std::move(w.buffer());
}

Status DecodeSeriesDefinition(std::string_view payload, SeriesDefinition* out) {
  Reader r(payload);
  uint8_t version = r.GetU8();
  if (!r.ok() || version != kSeriesRecordVersion) {
    return MakeErrorF(ErrorCode::kParse, "series record version {}", version);
  }
  uint64_t ref = r.GetVarint();
  if (ref > std::numeric_limits<SeriesRef>::max()) r.Fail();
  out->ref = static_cast<SeriesRef>(ref);
  out->desc.name = r.GetString();
  out->desc.help = r.GetString();
  out->desc.unit = r.GetString();
  uint8_t type = r.GetU8();
  if (type > 1) r.Fail();
  out->desc.type = type == 1 ? MetricType::kCounter : MetricType::kGauge;
  uint64_t n_names = r.GetVarint();
  if (n_names > kMaxLabelsPerSet * 2) r.Fail();
  out->desc.label_names.clear();
  for (uint64_t i = 0; r.ok() && i < n_names; ++i) out->desc.label_names.emplace_back(r.GetString());
  uint64_t n_labels = r.GetVarint();
  if (n_labels > kMaxLabelsPerSet) r.Fail();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (uint64_t i = 0; r.ok() && i < n_labels; ++i) {
    std::string name(r.GetString());
    std::string value(r.GetString(kMaxLabelValueBytes));
    pairs.emplace_back(std::move(name), std::move(value));
  }
  if (!r.ok() || r.remaining() != 0) return MakeError(ErrorCode::kParse, "malformed series record");
  auto labels = LabelSet::From(pairs);
  if (!labels) return MakeErrorF(ErrorCode::kParse, "series record labels: {}", labels.error().message);
  out->labels = std::move(*labels);
  return Ok();
}

}  // namespace ithbat::store::codec
