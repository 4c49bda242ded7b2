#pragma once
// CRC32C (Castagnoli), the checksum of the segment files and series-table records: the
// polynomial with hardware support (SSE4.2 crc32) and better error detection than CRC32.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ithbat::store {

// Extends `crc` (0 to start) over `n` bytes. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view s, uint32_t crc = 0) { return Crc32c(s.data(), s.size(), crc); }

}  // namespace ithbat::store
