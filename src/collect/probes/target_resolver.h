#pragma once
// Where to attach in one libcuda / libnccl file: the file offsets of the probed functions,
// found from the ELF symbol tables (any file; never loaded) and — for the host's own driver
// library only — from what its cuGetProcAddress returns for the (name, version, flags) triples
// the CUDA runtime asks (probe_table.h), because a driver may hand out an entry point that is
// not the exported symbol. Targets are de-duplicated by file offset: one address, one probe id,
// so a call is counted once whichever way the caller reached it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collect/probes/elf_reader.h"
#include "collect/probes/proc_maps.h"
#include "core/result.h"

namespace ithbat::collect::probes {

struct Target {
  uint16_t probe = 0;
  uint64_t offset = 0;
  bool from_symbol = false;    // the offset is an exported/defined symbol's
  bool from_procaddr = false;  // cuGetProcAddress returned this address for the probe's triple
  std::string symbol;          // the symbol at the offset ("" when cuGetProcAddress gave an internal one)
};

struct ResolvedLibrary {
  LibraryKind kind = LibraryKind::kCuda;
  std::vector<Target> targets;             // unique offsets
  std::vector<std::string> missing_core;   // core symbols (probe_table.h) the file lacks
  std::vector<std::string> missing_other;  // optional ones it lacks
  bool procaddr_used = false;              // the file was the trusted host driver and was asked
  std::string procaddr_note;               // why it was not asked, or what failed
  size_t procaddr_same = 0;                // triples answered with the exported symbol's address
  size_t procaddr_internal = 0;            // ... with an address that is no probed symbol's
  size_t procaddr_other_symbol = 0;        // ... with another probed symbol's (an older version)
};

// Resolves by symbols from `elf_path` (read, never loaded). When `trusted_host_path` is given
// (TrustedHostPath's result: the same file), also dlopens it and asks cuGetProcAddress.
Result<ResolvedLibrary> ResolveLibrary(const std::string& elf_path, LibraryKind kind,
                                       const std::optional<std::string>& trusted_host_path);

// cuGetProcAddress answers of the trusted driver at `host_path`: (probe id, file offset) per
// probe with a triple, offsets computed with `elf` (the same file's ELF). Exposed for tests.
struct ProcAddrAnswer {
  uint16_t probe = 0;
  uint64_t offset = 0;
};
Result<std::vector<ProcAddrAnswer>> QueryProcAddresses(const std::string& host_path, const ElfInfo& elf);

}  // namespace ithbat::collect::probes
