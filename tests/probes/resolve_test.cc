// Target resolution: the ELF reader, /proc/<pid>/maps parsing, cuGetProcAddress answers of a
// trusted driver (the fake libcuda hands out one non-exported entry point), and — when the
// machine has them — the real CUDA stub libcuda.so and libnccl.so.2.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "collect/probes/elf_reader.h"
#include "collect/probes/probe_table.h"
#include "collect/probes/proc_maps.h"
#include "collect/probes/target_resolver.h"
#include "testutil/testutil.h"

namespace ithbat::collect::probes {
namespace {

namespace fs = std::filesystem;

// The dynamic linker's view of a symbol: its st_value (address minus load base).
std::optional<uint64_t> DlsymValue(void* h, const char* name) {
  void* p = dlsym(h, name);
  if (p == nullptr) return std::nullopt;
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) return std::nullopt;
  return reinterpret_cast<uintptr_t>(p) - lm->l_addr;
}

TEST(ElfReader, FakeLibcudaSymbolsMatchTheDynamicLinker) {
  auto elf = ReadElf(ITHBAT_FAKE_CUDA_PATH);
  ASSERT_TRUE(elf) << elf.error().message;
  void* h = dlopen(ITHBAT_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  size_t checked = 0;
  for (const ProbeSpec& p : ProbeTable()) {
    if (p.library != LibraryKind::kCuda) continue;
    const std::string name(p.symbol);
    const auto truth = DlsymValue(h, name.c_str());
    auto it = elf->functions.find(name);
    if (!truth) {
      EXPECT_EQ(it, elf->functions.end()) << name << " is not exported but the reader found it";
      continue;
    }
    ASSERT_NE(it, elf->functions.end()) << name;
    EXPECT_EQ(it->second.value, *truth) << name;
    EXPECT_TRUE(it->second.dynamic) << name;
    ASSERT_TRUE(elf->SymbolOffset(name)) << name;
    ++checked;
  }
  dlclose(h);
  EXPECT_GE(checked, 30u);
}

TEST(ElfReader, NcclAliasesResolveToOneTargetPerFunction) {
  auto r = ResolveLibrary(ITHBAT_FAKE_NCCL_PATH, LibraryKind::kNccl, std::nullopt);
  ASSERT_TRUE(r) << r.error().message;
  std::set<uint64_t> offsets;
  std::set<uint16_t> probes;
  for (const Target& t : r->targets) {
    EXPECT_TRUE(offsets.insert(t.offset).second) << "offset attached twice: " << t.symbol;
    probes.insert(t.probe);
  }
  auto elf = ReadElf(ITHBAT_FAKE_NCCL_PATH);
  ASSERT_TRUE(elf);
  EXPECT_EQ(elf->SymbolOffset("ncclAllReduce"), elf->SymbolOffset("pncclAllReduce"));
  // The fake exports every core NCCL entry point.
  EXPECT_TRUE(r->missing_core.empty()) << fmt::format("{}", fmt::join(r->missing_core, ","));
  EXPECT_EQ(probes.size(), r->targets.size());
}

TEST(ElfReader, RejectsMalformedFilesWithoutCrashing) {
  testing::TempDir dir;
  dir.WriteFile("empty", "");
  dir.WriteFile("text", "not an elf at all, just text that is long enough to hold a header.................");
  std::ifstream in(ITHBAT_FAKE_CUDA_PATH, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  dir.WriteFile("truncated", std::string_view(bytes).substr(0, 200));
  // Section headers pointing past the end: the header says more than the file holds.
  std::string corrupt = bytes;
  corrupt.resize(bytes.size() / 2);
  dir.WriteFile("half", corrupt);
  for (const char* name : {"empty", "text", "truncated", "half"}) {
    auto r = ReadElf((dir.path() / name).string());
    EXPECT_FALSE(r) << name;
  }
  EXPECT_FALSE(ReadElf((dir.path() / "absent").string()));
  EXPECT_EQ(ReadElf((dir.path() / "absent").string()).error().code, ErrorCode::kNotFound);
}

TEST(ProcMaps, ParsesLinesAndFindsLibrariesByInode) {
  const std::string text =
      "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/python3\n"
      "7f0000000000-7f0000100000 r--p 00000000 fd:01 777 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06\n"
      "7f0000100000-7f0000900000 r-xp 00100000 fd:01 777 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06\n"
      "7f1000000000-7f1000100000 r-xp 00000000 00:2a 99 /venv/lib/nvidia/nccl/lib/libnccl.so.2\n"
      "7f2000000000-7f2000100000 r-xp 00000000 fd:01 555 /usr/lib/libcudart.so.12\n"
      "7f3000000000-7f3000100000 r-xp 00000000 fd:01 556 /opt/libcuda.so.1 (deleted)\n"
      "garbage line\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
  size_t skipped = 0;
  auto entries = ParseProcMaps(text, &skipped);
  EXPECT_EQ(skipped, 1u);
  ASSERT_EQ(entries.size(), 7u);
  EXPECT_EQ(entries[1].dev_major, 0xfdu);
  EXPECT_EQ(entries[1].inode, 777u);
  EXPECT_TRUE(entries[2].executable);
  auto libs = FindLibraries(entries);
  ASSERT_EQ(libs.size(), 2u);
  EXPECT_EQ(libs[0].kind, LibraryKind::kCuda);
  EXPECT_EQ(libs[0].map_start, 0x7f0000000000u);
  EXPECT_EQ(libs[1].kind, LibraryKind::kNccl);
  EXPECT_EQ(libs[1].dev_major, 0u);
  EXPECT_EQ(libs[1].dev_minor, 0x2au);
  EXPECT_FALSE(ClassifyLibrary("/x/libcudart.so.12"));
  EXPECT_FALSE(ClassifyLibrary("/x/libcudnn.so.9"));
  EXPECT_EQ(ClassifyLibrary("/x/libcuda.so"), LibraryKind::kCuda);
  EXPECT_EQ(ClassifyLibrary("/x/libnccl.so.2.28.9"), LibraryKind::kNccl);
}

// cuGetProcAddress of the fake: every answered triple is either the exported symbol of the
// probe (de-duplicated with it) or — for (cuLaunchKernel, 7000, per-thread) — a function that
// is no exported symbol, which becomes a second target of the same probe id.
TEST(ProcAddr, FindsTheNonExportedEntryAndDeduplicatesTheRest) {
  auto r = ResolveLibrary(ITHBAT_FAKE_CUDA_PATH, LibraryKind::kCuda, std::string(ITHBAT_FAKE_CUDA_PATH));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->procaddr_used) << r->procaddr_note;
  EXPECT_EQ(r->procaddr_internal, 1u);
  EXPECT_GT(r->procaddr_same, 20u);
  std::set<uint64_t> offsets;
  size_t ptsz_targets = 0;
  for (const Target& t : r->targets) {
    EXPECT_TRUE(offsets.insert(t.offset).second) << "duplicate offset " << t.offset;
    if (t.probe == 1) {  // cuLaunchKernel_ptsz
      ++ptsz_targets;
      if (!t.from_symbol) {
        EXPECT_TRUE(t.from_procaddr);
        EXPECT_TRUE(t.symbol.empty());
      }
    }
  }
  EXPECT_EQ(ptsz_targets, 2u) << "the exported cuLaunchKernel_ptsz and the internal entry";
  // Without trust, the ELF alone: one target for it.
  auto plain = ResolveLibrary(ITHBAT_FAKE_CUDA_PATH, LibraryKind::kCuda, std::nullopt);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->procaddr_used);
  EXPECT_EQ(plain->targets.size() + 1, r->targets.size());
}

// A copy of the driver in a world-writable directory is never trusted (anyone could have put
// it there), even though it is the very file a process maps.
TEST(ProcAddr, FileOutsideARootOwnedChainIsNotTrusted) {
  testing::TempDir dir;  // under /tmp: writable by others
  const fs::path copy = dir.path() / "libcuda.so.1";
  fs::copy_file(ITHBAT_FAKE_CUDA_PATH, copy);
  struct stat st {};
  ASSERT_EQ(stat(copy.c_str(), &st), 0);
  MappedLibrary lib;
  lib.kind = LibraryKind::kCuda;
  lib.path = copy.string();
  lib.dev_major = major(st.st_dev);
  lib.dev_minor = minor(st.st_dev);
  lib.inode = st.st_ino;
  fs::permissions(dir.path(), fs::perms::all);
  auto t = TrustedHostPath("/proc", getpid(), lib, {});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, ErrorCode::kPermission);
  // Another inode at a trusted-looking candidate does not count either.
  auto t2 = TrustedHostPath("/proc", getpid(), lib, {fs::path(ITHBAT_FAKE_CUDA_PATH).parent_path().string()});
  EXPECT_FALSE(t2);
}

// The real libraries nobody here wrote: every probe target is looked up; missing ones are
// printed. The test passes when the reading works (targets found, aliases de-duplicated).
void ResolveReal(const fs::path& path, LibraryKind kind) {
  if (!fs::exists(path)) {
    GTEST_SKIP() << path << " is not on this machine";
  }
  auto r = ResolveLibrary(path.string(), kind, std::nullopt);
  ASSERT_TRUE(r) << r.error().message;
  std::cout << path << ": " << r->targets.size() << " targets; missing core: ["
            << fmt::format("{}", fmt::join(r->missing_core, ", ")) << "]; missing optional: ["
            << fmt::format("{}", fmt::join(r->missing_other, ", ")) << "]\n";
  EXPECT_GT(r->targets.size(), 10u);
  std::set<uint64_t> offsets;
  for (const Target& t : r->targets) EXPECT_TRUE(offsets.insert(t.offset).second) << t.symbol;
}

TEST(RealLibraries, CudaStub) {
  ResolveReal("/usr/local/cuda-13.0/lib/stubs/libcuda.so", LibraryKind::kCuda);
}
TEST(RealLibraries, Nccl) { ResolveReal("/usr/local/cuda-13.0/lib/libnccl.so.2", LibraryKind::kNccl); }

}  // namespace
}  // namespace ithbat::collect::probes
