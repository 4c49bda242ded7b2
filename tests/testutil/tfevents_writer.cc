#include "testutil/tfevents_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>

namespace ithbat::testing {
namespace {

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
void PutKey(std::string& out, uint32_t field, uint32_t wire) { PutVarint(out, (uint64_t{field} << 3) | wire); }
void PutBytes(std::string& out, uint32_t field, std::string_view bytes) {
  PutKey(out, field, 2);
  PutVarint(out, bytes.size());
  out.append(bytes);
}

}  // namespace

uint32_t Crc32cBitwise(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32cBitwise(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(std::string_view data) {
  std::string out;
  std::string len;
  PutLe(len, data.size(), 8);
  out += len;
  PutLe(out, MaskedCrc32c(len), 4);
  out.append(data);
  PutLe(out, MaskedCrc32c(data), 4);
  return out;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string ev;
  PutKey(ev, 1, 1);
  PutLe(ev, std::bit_cast<uint64_t>(wall_time), 8);
  PutBytes(ev, 3, "brain.Event:2");
  return ev;
}

std::string EncodeScalarEvent(int64_t step, double wall_time, std::string_view tag, float value, ScalarStyle style,
                              bool with_metadata) {
  std::string v;  // Summary.Value
  PutBytes(v, 1, tag);
  if (style == ScalarStyle::kSimpleValue) {
    PutKey(v, 2, 5);
    PutLe(v, std::bit_cast<uint32_t>(value), 4);
  } else {
    if (with_metadata) {
      std::string plugin;
      PutBytes(plugin, 1, "scalars");
      std::string meta;
      PutBytes(meta, 1, plugin);
      PutBytes(v, 9, meta);
    }
    std::string tensor;
    PutKey(tensor, 1, 0);
    PutVarint(tensor, 1);     // DT_FLOAT
    PutBytes(tensor, 2, "");  // rank 0
    std::string content;
    PutLe(content, std::bit_cast<uint32_t>(value), 4);
    PutBytes(tensor, 4, content);
    PutBytes(v, 8, tensor);
  }
  std::string summary;
  PutBytes(summary, 1, v);
  std::string ev;
  PutKey(ev, 1, 1);
  PutLe(ev, std::bit_cast<uint64_t>(wall_time), 8);
  PutKey(ev, 2, 0);
  PutVarint(ev, static_cast<uint64_t>(step));
  PutBytes(ev, 5, summary);
  return ev;
}

TfEventsWriter::TfEventsWriter(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

TfEventsWriter::~TfEventsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

bool TfEventsWriter::WriteRaw(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool TfEventsWriter::WriteFileVersion(double wall_time) { return WriteRaw(TfRecord(EncodeFileVersionEvent(wall_time))); }

bool TfEventsWriter::WriteScalar(int64_t step, std::string_view tag, float value, double wall_time, ScalarStyle style) {
  bool metadata = false;
  if (style == ScalarStyle::kTensor && !tags_with_metadata_.contains(tag)) {
    metadata = true;
    tags_with_metadata_.emplace(tag);
  }
  return WriteRaw(TfRecord(EncodeScalarEvent(step, wall_time, tag, value, style, metadata)));
}

}  // namespace ithbat::testing
