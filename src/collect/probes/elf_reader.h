#pragma once
// A bounded reader of the parts of an ELF file that uprobe targeting needs: the function
// symbols of .dynsym and .symtab and the PT_LOAD segments (symbol value → file offset). It reads
// with pread and never maps, loads or runs the file, so it is safe on a library a container
// controls. Hand-written rather than libelf: ~200 lines with every size bounded and checked
// against the file size, no extra dependency, and the same code is easy to fuzz.
//
// Only 64-bit little-endian ELF (x86-64, aarch64). Errors: kNotFound/kIo (cannot open/read),
// kParse (not ELF, truncated, a table out of the file), kResourceExhausted (a bound).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/result.h"

namespace ithbat::collect::probes {

struct ElfSymbol {
  uint64_t value = 0;  // virtual address (st_value)
  uint64_t size = 0;
  bool global = false;   // STB_GLOBAL or STB_WEAK (else local)
  bool dynamic = false;  // from .dynsym (exported)
};

struct ElfLoadSegment {
  uint64_t vaddr = 0;
  uint64_t memsz = 0;
  uint64_t offset = 0;
  uint64_t filesz = 0;
  bool executable = false;
};

// Tables are also checked against the file's size before any allocation, so these bound what a
// real (large) file can cost; 64 MiB covers a driver's .symtab/.strtab with room to spare.
struct ElfLimits {
  uint64_t max_table_bytes = 64ull << 20;  // one symbol or string table
  size_t max_symbols = 2'000'000;          // entries read over all tables
  uint32_t max_sections = 65'535;
  uint32_t max_segments = 4096;
};

struct ElfInfo {
  std::vector<ElfLoadSegment> segments;
  // Defined function symbols (STT_FUNC) by name; .dynsym wins over .symtab for one name.
  std::unordered_map<std::string, ElfSymbol> functions;
  bool has_symtab = false;  // a .symtab was present (the file is not stripped)
  uint64_t symbols_read = 0;

  // File offset of a virtual address inside a PT_LOAD's file image; nullopt outside.
  std::optional<uint64_t> FileOffset(uint64_t vaddr) const;
  // File offset of a function symbol; nullopt if absent or not in a loaded segment.
  std::optional<uint64_t> SymbolOffset(std::string_view name) const;
};

// Reads `path`. When `wanted` is non-null only those names are kept (memory stays small on a
// driver library with many symbols).
Result<ElfInfo> ReadElf(const std::string& path, const std::unordered_set<std::string>* wanted = nullptr,
                        const ElfLimits& limits = {});

}  // namespace ithbat::collect::probes
