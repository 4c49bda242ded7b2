#include "collect/probes/target_resolver.h"

#include <string_view>
#include <unordered_set>

#include <dlfcn.h>
#include <fmt/core.h>
#include <link.h>

#include "collect/probes/probe_table.h"

namespace ithbat::collect::probes {
namespace {

// cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status) and v1 (no status).
using GetProcAddressV2 = int (*)(const char*, void**, int, uint64_t, int*);
using GetProcAddressV1 = int (*)(const char*, void**, int, uint64_t);

// Built by append rather than `"p" + std::string(...)`: g++ 12 at -O3 warns falsely
// (-Wrestrict, GCC PR105329) on that operator+.
std::string NcclTwin(std::string_view symbol) {
  std::string twin;
  twin.reserve(symbol.size() + 1);
  twin.push_back('p');
  twin.append(symbol);
  return twin;
}

}  // namespace

Result<std::vector<ProcAddrAnswer>> QueryProcAddresses(const std::string& host_path, const ElfInfo& elf) {
  // RTLD_LOCAL: the driver's symbols do not leak into the agent's namespace; dlclose afterwards
  // (the answers are file offsets, valid without the mapping).
  void* h = dlopen(host_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return MakeErrorF(ErrorCode::kUnavailable, "dlopen({}): {}", host_path, e != nullptr ? e : "?");
  }
  struct Closer {
    void* h;
    ~Closer() { dlclose(h); }
  } closer{h};
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr) {
    return MakeErrorF(ErrorCode::kInternal, "dlinfo({}) gave no link map", host_path);
  }
  auto v2 = reinterpret_cast<GetProcAddressV2>(dlsym(h, "cuGetProcAddress_v2"));
  auto v1 = reinterpret_cast<GetProcAddressV1>(dlsym(h, "cuGetProcAddress"));
  if (v2 == nullptr && v1 == nullptr)
    return MakeErrorF(ErrorCode::kNotFound, "{}: no cuGetProcAddress", host_path);
  std::vector<ProcAddrAnswer> out;
  for (const ProbeSpec& p : ProbeTable()) {
    if (p.library != LibraryKind::kCuda || !p.procaddr) continue;
    const std::string name(p.procaddr->name);
    void* pfn = nullptr;
    int status = 0;
    const int rc = v2 != nullptr ? v2(name.c_str(), &pfn, p.procaddr->version, p.procaddr->flags, &status)
                                 : v1(name.c_str(), &pfn, p.procaddr->version, p.procaddr->flags);
    if (rc != 0 || pfn == nullptr) continue;  // not offered by this driver (version, feature)
    // Only addresses inside this very object are meaningful as offsets of this file.
    Dl_info info{};
    link_map* owner = nullptr;
    if (dladdr1(pfn, &info, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) == 0 || owner != lm) continue;
    const uint64_t vaddr = reinterpret_cast<uintptr_t>(pfn) - lm->l_addr;
    const auto off = elf.FileOffset(vaddr);
    if (!off) continue;
    out.push_back({p.id, *off});
  }
  return out;
}

Result<ResolvedLibrary> ResolveLibrary(const std::string& elf_path, LibraryKind kind,
                                       const std::optional<std::string>& trusted_host_path) {
  std::unordered_set<std::string> wanted;
  for (const ProbeSpec& p : ProbeTable()) {
    if (p.library != kind) continue;
    wanted.emplace(p.symbol);
    if (kind == LibraryKind::kNccl) wanted.insert(NcclTwin(p.symbol));
  }
  auto elf = ReadElf(elf_path, &wanted);
  if (!elf) return std::unexpected(elf.error());
  ResolvedLibrary r;
  r.kind = kind;
  auto add = [&](uint16_t probe, uint64_t offset, bool sym, std::string_view name) -> int {
    for (Target& t : r.targets) {
      if (t.offset != offset) continue;
      t.from_symbol |= sym;
      t.from_procaddr |= !sym;
      return t.probe == probe ? 0 : 1;  // 1: another probe already owns this address
    }
    r.targets.push_back({probe, offset, sym, !sym, std::string(name)});
    return 2;
  };
  for (const ProbeSpec& p : ProbeTable()) {
    if (p.library != kind) continue;
    std::optional<uint64_t> off = elf->SymbolOffset(p.symbol);
    if (!off && kind == LibraryKind::kNccl) off = elf->SymbolOffset(NcclTwin(p.symbol));
    if (!off) {
      (p.core ? r.missing_core : r.missing_other).emplace_back(p.symbol);
      continue;
    }
    add(p.id, *off, true, p.symbol);
  }
  if (kind == LibraryKind::kCuda) {
    if (!trusted_host_path) {
      r.procaddr_note = "not the trusted host driver: resolved from the ELF symbols only";
    } else {
      auto answers = QueryProcAddresses(*trusted_host_path, *elf);
      if (!answers) {
        r.procaddr_note = answers.error().message;
      } else {
        r.procaddr_used = true;
        for (const ProcAddrAnswer& a : *answers) {
          const ProbeSpec* p = FindProbe(a.probe);
          const bool same = p != nullptr && elf->SymbolOffset(p->symbol) == a.offset;
          const int how =
              add(a.probe, a.offset, false, same ? std::string_view(p->symbol) : std::string_view());
          if (same) {
            ++r.procaddr_same;
          } else if (how == 2) {
            ++r.procaddr_internal;
          } else {
            ++r.procaddr_other_symbol;
          }
        }
      }
    }
  }
  return r;
}

}  // namespace ithbat::collect::probes
