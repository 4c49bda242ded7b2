// The store's segment files (docs/storage.md) are read back after crashes, disk faults and by
// anyone who copies a data directory: any bytes must decode or be refused — never crash, never
// allocate without bound. First byte even: the input is a segment body (after zstd) for the
// block codec; odd: the rest is a whole segment file in a data directory, loaded as the agent
// loads one at start (header, CRCs, zstd, body), where a bad one is set aside and counted.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "store/block_codec.h"
#include "store/disk.h"
#include "require.h"

namespace {

using ithbat::fuzz::Require;

const std::filesystem::path& Dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ithbat-segment-fuzz-XXXXXX").string();
    Require(mkdtemp(tmpl.data()) != nullptr, "temp dir");
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

}  // namespace

using ithbat::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat::store;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    SegmentContents contents;
    (void)codec::DecodeBody(rest, &contents);
    return 0;
  }
  const std::filesystem::path dir = Dir() / "data";
  std::filesystem::remove_all(dir);
  {
    auto store = DiskStore::Open(dir.string(), 1ull << 30);
    Require(store.has_value(), "an empty data directory opens");
  }
  std::ofstream(dir / "seg-0000000000000001.ith", std::ios::binary).write(rest.data(),
                                                                           static_cast<std::streamsize>(rest.size()));
  auto store = DiskStore::Open(dir.string(), 1ull << 30);
  Require(store.has_value(), "a data directory with a bad segment still opens");
  (void)(*store)->Load([](const SeriesDefinition&) {}, [](const SegmentContents&) {});
  Require((*store)->Stats().segments + (*store)->Stats().corrupt_segments <= 1, "one file, one segment at most");
  return 0;
}
