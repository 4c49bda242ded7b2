// The probes collector without the kernel: its schema and its options.
#include <set>

#include <gtest/gtest.h>

#include "agent/tracked_processes.h"
#include "collect/probes/probe_table.h"
#include "collect/probes/probes_collector.h"
#include "cuda_probes_abi.h"

namespace ithbat::collect::probes {
namespace {

TEST(ProbesCollector, DescribesValidUniqueMetrics) {
  agent::TrackedProcesses tracked;
  ProbesOptions o;
  o.tracked = &tracked;
  auto c = ProbesCollector::Create(std::move(o));
  ASSERT_TRUE(c) << c.error().message;
  std::set<std::string> names;
  for (const MetricDesc& d : (*c)->Describe()) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_EQ(d.name.rfind("ithbat_probe_", 0), 0u) << d.name;
  }
  EXPECT_GE(names.size(), 15u);
}

TEST(ProbesCollector, RequiresATrackedSet) {
  auto c = ProbesCollector::Create(ProbesOptions{});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
}

// The table is the cookie's source: ids unique and in range, NCCL argument positions within the
// seven the program can read, every timed probe a class whose duration is reported.
TEST(ProbeTable, IdsAndArgumentsFitTheCookie) {
  std::set<uint16_t> ids;
  std::set<std::string_view> symbols;
  size_t core = 0;
  for (const ProbeSpec& p : ProbeTable()) {
    EXPECT_TRUE(ids.insert(p.id).second) << p.symbol;
    EXPECT_TRUE(symbols.insert(p.symbol).second) << p.symbol;
    EXPECT_LT(p.id, CUDA_PROBE_ID_LAUNCH_GAP) << p.symbol;
    EXPECT_LE(p.arg_bytes, 7) << p.symbol;
    EXPECT_LE(p.arg_dtype, 7) << p.symbol;
    EXPECT_LE(p.arg_comm, 7) << p.symbol;
    EXPECT_EQ(CUDA_PROBE_COOKIE_ID(p.Cookie()), p.id);
    EXPECT_EQ(CUDA_PROBE_COOKIE_ARG_BYTES(p.Cookie()), p.arg_bytes);
    EXPECT_EQ((CUDA_PROBE_COOKIE_FLAGS(p.Cookie()) & CUDA_PROBE_F_TIMED) != 0, p.timed) << p.symbol;
    if (p.cls == ProbeClass::kNcclColl) {
      EXPECT_NE(p.arg_comm, 0) << p.symbol;
      EXPECT_FALSE(p.nccl_op.empty()) << p.symbol;
    }
    if (p.library == LibraryKind::kCuda) {
      EXPECT_TRUE(p.procaddr.has_value()) << p.symbol;
    }
    core += p.core ? 1 : 0;
  }
  // nvidia-abi.md §5's core set: 22 libcuda + 11 libnccl functions (46 attachments there; here
  // launches are entry-only, as issue 4 asks, and cuMemAlloc_v2 / cuMemFree_v2 are timed).
  EXPECT_EQ(core, 33u);
}

}  // namespace
}  // namespace ithbat::collect::probes
