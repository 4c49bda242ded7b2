// The Event protobuf, decoded by hand from the wire format. Not libprotobuf: three small
// messages and a handful of fields do not justify code generation, a .proto copy of
// TensorFlow's schema and a heavy runtime dependency in the agent and its fuzzers; the wire
// format is stable and simple (varint, fixed32/64, length-delimited), and a hand decoder can
// bound every length by the record it reads.
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "collect/joblog/tensorboard/tensorboard.h"

namespace ithbat::collect::joblog::tensorboard {
namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

// A cursor over one message's bytes; every read is checked against its end.
class Wire {
 public:
  explicit Wire(std::string_view s)
      : p_(reinterpret_cast<const uint8_t*>(s.data())), end_(p_ + s.size()) {}
  bool done() const { return p_ >= end_; }

  bool Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }
  bool Fixed32(uint32_t& v) {
    if (end_ - p_ < 4) return false;
    v = static_cast<uint32_t>(p_[0]) | static_cast<uint32_t>(p_[1]) << 8 | static_cast<uint32_t>(p_[2]) << 16 |
        static_cast<uint32_t>(p_[3]) << 24;
    p_ += 4;
    return true;
  }
  bool Fixed64(uint64_t& v) {
    uint32_t lo = 0, hi = 0;
    if (end_ - p_ < 8) return false;
    Fixed32(lo);
    Fixed32(hi);
    v = static_cast<uint64_t>(hi) << 32 | lo;
    return true;
  }
  bool Bytes(std::string_view& out) {
    uint64_t n = 0;
    if (!Varint(n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    out = std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return true;
  }
  // The next field's number and wire type; false at a malformed key.
  bool Key(uint32_t& field, uint32_t& wire) {
    uint64_t k = 0;
    if (!Varint(k)) return false;
    field = static_cast<uint32_t>(k >> 3);
    wire = static_cast<uint32_t>(k & 7);
    return field != 0 && (k >> 3) <= 0x1fffffff;
  }
  // Skips an unknown field. Groups (wire types 3/4, deprecated) do not occur in these messages
  // and are refused rather than walked.
  bool Skip(uint32_t wire) {
    uint64_t v = 0;
    std::string_view s;
    switch (wire) {
      case kVarint:
        return Varint(v);
      case kFixed64:
        return Fixed64(v);
      case kLen:
        return Bytes(s);
      case kFixed32: {
        uint32_t w = 0;
        return Fixed32(w);
      }
      default:
        return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

Error Malformed(std::string_view what) { return Error{ErrorCode::kParse, fmt::format("malformed event: {}", what)}; }

// TensorFlow DataType values (types.proto).
enum DataType : uint64_t {
  kDtFloat = 1,
  kDtDouble = 2,
  kDtInt32 = 3,
  kDtUint8 = 4,
  kDtInt16 = 5,
  kDtInt8 = 6,
  kDtInt64 = 9,
  kDtBfloat16 = 14,
  kDtUint16 = 17,
  kDtHalf = 19,
  kDtUint32 = 22,
  kDtUint64 = 23,
};

double HalfToDouble(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(mant + 1024, exp - 25);
}

// First element of a repeated numeric field, packed (wire type 2) or not; counts elements.
struct Repeated {
  bool present = false;
  uint64_t first_bits = 0;
  uint64_t count = 0;
};

bool ReadRepeated(Wire& w, uint32_t wire, uint32_t element_wire, Repeated& r) {
  auto one = [&](Wire& from) -> bool {
    uint64_t v = 0;
    bool ok = false;
    if (element_wire == kVarint) {
      ok = from.Varint(v);
    } else if (element_wire == kFixed32) {
      uint32_t x = 0;
      ok = from.Fixed32(x);
      v = x;
    } else {
      ok = from.Fixed64(v);
    }
    if (!ok) return false;
    if (r.count++ == 0) r.first_bits = v;
    r.present = true;
    return true;
  };
  if (wire == element_wire) return one(w);
  if (wire != kLen) return false;
  std::string_view packed;
  if (!w.Bytes(packed)) return false;
  Wire pw(packed);
  while (!pw.done()) {
    if (!one(pw)) return false;
  }
  return true;
}

// The element count of a TensorShapeProto; -1 when unknown or malformed-but-harmless.
Result<int64_t> ShapeElements(std::string_view shape) {
  Wire w(shape);
  int64_t elements = 1;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("tensor shape key"));
    if (field == 2 && wire == kLen) {  // Dim
      std::string_view dim;
      if (!w.Bytes(dim)) return std::unexpected(Malformed("tensor shape dim"));
      Wire dw(dim);
      int64_t size = 0;  // proto3 default
      while (!dw.done()) {
        uint32_t f = 0, t = 0;
        if (!dw.Key(f, t)) return std::unexpected(Malformed("tensor dim key"));
        if (f == 1 && t == kVarint) {
          uint64_t v = 0;
          if (!dw.Varint(v)) return std::unexpected(Malformed("tensor dim size"));
          size = static_cast<int64_t>(v);
        } else if (!dw.Skip(t)) {
          return std::unexpected(Malformed("tensor dim field"));
        }
      }
      if (size < 0) return int64_t{-1};
      if (size != 1) elements = size == 0 ? 0 : 2;  // only "exactly one" matters
    } else if (field == 3 && wire == kVarint) {  // unknown_rank
      uint64_t v = 0;
      if (!w.Varint(v)) return std::unexpected(Malformed("tensor unknown_rank"));
      if (v) return int64_t{-1};
    } else if (!w.Skip(wire)) {
      return std::unexpected(Malformed("tensor shape field"));
    }
  }
  return elements;
}

// The value of a one-element numeric TensorProto; nullopt for any other tensor.
Result<std::optional<double>> TensorScalar(std::string_view tensor) {
  Wire w(tensor);
  uint64_t dtype = 0;
  int64_t elements = 1;  // no shape: a scalar
  std::string_view content;
  Repeated floats, doubles, ints, int64s, halves, uint32s, uint64s;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("tensor key"));
    bool ok = true;
    switch (field) {
      case 1:
        ok = wire == kVarint && w.Varint(dtype);
        break;
      case 2: {
        std::string_view shape;
        ok = wire == kLen && w.Bytes(shape);
        if (ok) {
          auto n = ShapeElements(shape);
          if (!n) return std::unexpected(n.error());
          elements = *n;
        }
        break;
      }
      case 4:
        ok = wire == kLen && w.Bytes(content);
        break;
      case 5:
        ok = ReadRepeated(w, wire, kFixed32, floats);
        break;
      case 6:
        ok = ReadRepeated(w, wire, kFixed64, doubles);
        break;
      case 7:
        ok = ReadRepeated(w, wire, kVarint, ints);
        break;
      case 10:
        ok = ReadRepeated(w, wire, kVarint, int64s);
        break;
      case 13:
        ok = ReadRepeated(w, wire, kVarint, halves);
        break;
      case 16:
        ok = ReadRepeated(w, wire, kVarint, uint32s);
        break;
      case 17:
        ok = ReadRepeated(w, wire, kVarint, uint64s);
        break;
      default:
        ok = w.Skip(wire);
    }
    if (!ok) return std::unexpected(Malformed(fmt::format("tensor field {}", field)));
  }
  if (elements != 1) return std::optional<double>();
  auto le = [&](size_t n) -> uint64_t {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(content[k])) << (8 * k);
    return v;
  };
  // tensor_content holds the raw little-endian element; otherwise the typed field (TF fills a
  // tensor from one value; none at all means zero).
  auto from_content_or = [&](size_t width, const Repeated& r, auto convert) -> std::optional<double> {
    if (!content.empty()) {
      if (content.size() != width) return std::nullopt;
      return convert(le(width));
    }
    return convert(r.present ? r.first_bits : 0);
  };
  switch (dtype) {
    case kDtFloat:
      return from_content_or(4, floats, [](uint64_t b) {
        return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b)));
      });
    case kDtDouble:
      return from_content_or(8, doubles, [](uint64_t b) { return std::bit_cast<double>(b); });
    case kDtInt32:
      return from_content_or(4, ints, [](uint64_t b) { return static_cast<double>(static_cast<int32_t>(b)); });
    case kDtInt16:
      return from_content_or(2, ints, [](uint64_t b) { return static_cast<double>(static_cast<int16_t>(b)); });
    case kDtInt8:
      return from_content_or(1, ints, [](uint64_t b) { return static_cast<double>(static_cast<int8_t>(b)); });
    case kDtUint8:
      return from_content_or(1, ints, [](uint64_t b) { return static_cast<double>(static_cast<uint8_t>(b)); });
    case kDtUint16:
      return from_content_or(2, ints, [](uint64_t b) { return static_cast<double>(static_cast<uint16_t>(b)); });
    case kDtInt64:
      return from_content_or(8, int64s, [](uint64_t b) { return static_cast<double>(static_cast<int64_t>(b)); });
    case kDtUint32:
      return from_content_or(4, uint32s, [](uint64_t b) { return static_cast<double>(static_cast<uint32_t>(b)); });
    case kDtUint64:
      return from_content_or(8, uint64s, [](uint64_t b) { return static_cast<double>(b); });
    case kDtHalf:
      return from_content_or(2, halves, [](uint64_t b) { return HalfToDouble(static_cast<uint16_t>(b)); });
    case kDtBfloat16:
      return from_content_or(2, halves, [](uint64_t b) {
        return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b & 0xffff) << 16));
      });
    default:
      return std::optional<double>();  // strings, bools, complex, resources: not scalars we use
  }
}

// SummaryMetadata.plugin_data.plugin_name, "" when absent.
Result<std::string_view> PluginName(std::string_view metadata) {
  Wire w(metadata);
  std::string_view name;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("metadata key"));
    if (field == 1 && wire == kLen) {
      std::string_view plugin;
      if (!w.Bytes(plugin)) return std::unexpected(Malformed("plugin data"));
      Wire pw(plugin);
      while (!pw.done()) {
        uint32_t f = 0, t = 0;
        if (!pw.Key(f, t)) return std::unexpected(Malformed("plugin data key"));
        if (f == 1 && t == kLen) {
          if (!pw.Bytes(name)) return std::unexpected(Malformed("plugin name"));
        } else if (!pw.Skip(t)) {
          return std::unexpected(Malformed("plugin data field"));
        }
      }
    } else if (!w.Skip(wire)) {
      return std::unexpected(Malformed("metadata field"));
    }
  }
  return name;
}

// One Summary.Value; appends a Scalar when it is one.
Status DecodeValue(std::string_view value, std::vector<Scalar>& out) {
  Wire w(value);
  std::string_view tag, tensor, metadata;
  bool has_simple = false, has_tensor = false, has_metadata = false;
  float simple = 0;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("value key"));
    bool ok = true;
    switch (field) {
      case 1:
        ok = wire == kLen && w.Bytes(tag);
        break;
      case 2: {
        uint32_t bits = 0;
        ok = wire == kFixed32 && w.Fixed32(bits);
        simple = std::bit_cast<float>(bits);
        has_simple = true;
        break;
      }
      case 8:
        ok = wire == kLen && w.Bytes(tensor);
        has_tensor = true;
        break;
      case 9:
        ok = wire == kLen && w.Bytes(metadata);
        has_metadata = true;
        break;
      default:
        ok = w.Skip(wire);
    }
    if (!ok) return std::unexpected(Malformed(fmt::format("value field {}", field)));
  }
  std::optional<double> v;
  if (has_simple) {
    v = simple;
  } else if (has_tensor) {
    if (has_metadata) {
      // TF2 writes the plugin only with a tag's first value; when it is there and names
      // another plugin (text, histograms, ...), the tensor is not a scalar series.
      auto plugin = PluginName(metadata);
      if (!plugin) return std::unexpected(plugin.error());
      if (!plugin->empty() && *plugin != "scalars") return Ok();
    }
    auto t = TensorScalar(tensor);
    if (!t) return std::unexpected(t.error());
    v = *t;
  }
  if (!v || out.size() >= kMaxScalarsPerEvent) return Ok();
  Scalar s;
  s.tag = std::string(tag.substr(0, kMaxTagBytes));
  s.value = *v;
  out.push_back(std::move(s));
  return Ok();
}

Status DecodeSummary(std::string_view summary, std::vector<Scalar>& out) {
  Wire w(summary);
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("summary key"));
    if (field == 1) {
      std::string_view value;
      if (wire != kLen || !w.Bytes(value)) return std::unexpected(Malformed("summary value"));
      if (auto st = DecodeValue(value, out); !st) return st;
    } else if (!w.Skip(wire)) {
      return std::unexpected(Malformed("summary field"));
    }
  }
  return Ok();
}

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (unsigned char c : data) crc = kCrcTable[(crc ^ c) & 0xff] ^ (crc >> 8);
  return ~crc;
}

Result<std::vector<Scalar>> DecodeEvent(std::string_view record) {
  std::vector<Scalar> out;
  Wire w(record);
  double wall_time = 0;
  int64_t step = 0;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.Key(field, wire)) return std::unexpected(Malformed("event key"));
    bool ok = true;
    switch (field) {
      case 1: {
        uint64_t bits = 0;
        ok = wire == kFixed64 && w.Fixed64(bits);
        wall_time = std::bit_cast<double>(bits);
        break;
      }
      case 2: {
        uint64_t v = 0;
        ok = wire == kVarint && w.Varint(v);
        step = static_cast<int64_t>(v);
        break;
      }
      case 5: {
        std::string_view summary;
        ok = wire == kLen && w.Bytes(summary);
        if (ok) {
          if (auto st = DecodeSummary(summary, out); !st) return std::unexpected(st.error());
        }
        break;
      }
      default:
        ok = w.Skip(wire);
    }
    if (!ok) return std::unexpected(Malformed(fmt::format("event field {}", field)));
  }
  // Step and wall time may come after the summary on the wire.
  for (Scalar& s : out) {
    s.step = step;
    s.wall_time = wall_time;
  }
  return out;
}

}  // namespace ithbat::collect::joblog::tensorboard
