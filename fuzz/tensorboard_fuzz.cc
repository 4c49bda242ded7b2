// The TensorBoard reader. The first byte picks a mode:
//   even: the rest is a raw byte stream for the record framing (CRC failures, torn records,
//         garbage), appended in pieces whose sizes come from the input;
//   odd:  the rest is a list of [1-byte length][payload] that the harness frames with valid
//         CRCs, so the protobuf decoder behind the framing is reached (a fuzzer cannot forge
//         CRC32C by mutation).
// Every record's data goes through DecodeEvent and ScalarToEvent; the whole input also goes to
// DecodeEvent directly.
#include <string>

#include "collect/joblog/tensorboard/tensorboard.h"
#include "fuzz_util.h"

namespace tb = ithbat::collect::joblog::tensorboard;
using ithbat::fuzz::Require;

namespace {

std::string Frame(std::string_view data) {
  std::string out;
  std::string len;
  for (int k = 0; k < 8; ++k) len.push_back(static_cast<char>((uint64_t{data.size()} >> (8 * k)) & 0xff));
  const uint32_t len_crc = tb::MaskCrc(tb::Crc32c(len));
  const uint32_t data_crc = tb::MaskCrc(tb::Crc32c(data));
  out += len;
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((len_crc >> (8 * k)) & 0xff));
  out.append(data);
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((data_crc >> (8 * k)) & 0xff));
  return out;
}

void Decode(std::string_view record) {
  auto scalars = tb::DecodeEvent(record);
  if (!scalars) return;
  Require(scalars->size() <= tb::kMaxScalarsPerEvent, "too many scalars");
  for (const auto& s : *scalars) {
    Require(s.tag.size() <= tb::kMaxTagBytes, "tag over the bound");
    if (auto ev = tb::ScalarToEvent(s)) Require(!ev->name.empty() && ev->name.size() <= 80, "event name");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool framed = data[0] & 1;
  const unsigned piece_seed = data[0] >> 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  Decode(rest);
  std::string stream;
  size_t frames = 0;
  if (framed) {
    while (!rest.empty()) {
      ++frames;
      const size_t n = std::min<size_t>(static_cast<uint8_t>(rest[0]), rest.size() - 1);
      stream += Frame(rest.substr(1, n));
      rest.remove_prefix(1 + n);
    }
  } else {
    stream = std::string(rest);
  }
  tb::RecordReader reader;
  const size_t piece = 1 + piece_seed * 37;
  size_t records = 0;
  for (size_t off = 0; off < stream.size(); off += piece) {
    reader.Append(std::string_view(stream).substr(off, piece));
    for (;;) {
      std::string_view record;
      const auto status = reader.Next(record);
      if (status == tb::RecordReader::Status::kNeedMore || status == tb::RecordReader::Status::kBroken) break;
      if (status == tb::RecordReader::Status::kRecord) {
        ++records;
        Require(record.size() <= tb::kMaxRecordBytes, "record over the bound");
        Decode(record);
      }
    }
    Require(reader.buffered_bytes() <= tb::kMaxRecordBytes + 16 + piece, "reader buffers too much");
  }
  Require(reader.offset() + reader.buffered_bytes() <= stream.size() || reader.broken(), "offset past the stream");
  if (framed) Require(!reader.broken() && records == frames, "valid framing not read back");
  return 0;
}
