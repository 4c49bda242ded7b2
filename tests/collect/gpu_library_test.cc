// NvmlLibrary and the GPU collector's schema, without any NVML (real or fake): what happens
// when the library is missing or is not NVML, and whether every declared metric follows the
// naming rules.
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collect/gpu/gpu_collector.h"
#include "collect/gpu/gpu_metrics.h"
#include "collect/gpu/nvml_library.h"
#include "core/metric.h"
#include "testutil/fake_sink.h"

namespace ithbat::collect {
namespace {

using ::testing::HasSubstr;

TEST(NvmlLibraryTest, MissingLibraryIsNotFoundWithDlerrorText) {
  auto lib = NvmlLibrary::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib);
  EXPECT_EQ(lib.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(lib.error().message, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
  EXPECT_THAT(lib.error().message, HasSubstr("No such file"));
}

TEST(NvmlLibraryTest, LibraryWithoutRequiredExportsIsNotFoundNamingTheExport) {
  // libm is a real shared library but not NVML: the first required export is missing.
  auto lib = NvmlLibrary::Load("libm.so.6");
  ASSERT_FALSE(lib);
  EXPECT_EQ(lib.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(lib.error().message, HasSubstr("nvmlInit_v2"));
}

TEST(NvmlLibraryTest, EmptyPathIsInvalid) {
  auto lib = NvmlLibrary::Load("");
  ASSERT_FALSE(lib);
  EXPECT_EQ(lib.error().code, ErrorCode::kInvalidArgument);
}

TEST(GpuCollectorTest, InitWithoutNvmlFailsCleanly) {
  GpuOptions o;
  o.library = "/nonexistent/libnvidia-ml.so.1";
  auto c = GpuCollector::Create(o);
  ::ithbat::testing::FakeSink sink;
  Status s = c->Init(sink);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(c->Health().state, agent::CollectorState::kFailed);
  c->Stop();  // harmless after a failed Init
}

TEST(GpuMetricsTest, EveryDescFollowsTheNamingRulesAndNamesAreUnique) {
  auto c = GpuCollector::Create(GpuOptions{});
  std::set<std::string> names;
  for (const MetricDesc& d : c->Describe()) {
    EXPECT_TRUE(ValidateMetricDesc(d)) << d.name;
    EXPECT_TRUE(d.name.starts_with("ithbat_gpu_")) << d.name;
    EXPECT_FALSE(d.help.empty()) << d.name;
    EXPECT_FALSE(d.help.ends_with(".")) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate " << d.name;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kGpuMetricCount));
}

TEST(GpuMetricsTest, LabelValuesFromKeys) {
  const auto& defs = GpuMetricDefs();
  EXPECT_EQ(GpuLabelValue(defs[kGpuClock], 0, 1), "sm");
  EXPECT_EQ(GpuLabelValue(defs[kGpuEccErrors], 0, GpuKey2(1, 0)), "uncorrected");
  EXPECT_EQ(GpuLabelValue(defs[kGpuEccErrors], 1, GpuKey2(1, 0)), "volatile");
  EXPECT_EQ(GpuLabelValue(defs[kGpuNvLinkLinkErrors], 0, GpuKey2(17, 2)), "17");
  EXPECT_EQ(GpuLabelValue(defs[kGpuNvLinkLinkErrors], 1, GpuKey2(17, 2)), "crc_flit");
  EXPECT_EQ(GpuLabelValue(defs[kGpuProcessMemory], 0, 4'000'000), "4000000");
  EXPECT_EQ(GpuLabelValue(defs[kGpuClockEvent], 0, 99), "unknown_99");
}

}  // namespace
}  // namespace ithbat::collect
