// The /metrics text: exact output for a small store, and the real Prometheus parser/linter
// (promtool) accepting output with every awkward value the store can hold.
#include "serve/exposition.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "core/labels.h"
#include "core/metric.h"
#include "core/time.h"
#include "serve/dcgm_names.h"
#include "serve/http_server.h"
#include "store/store.h"
#include "testutil/testutil.h"

namespace ithbat::serve {
namespace {

constexpr TimeNs kT0 = 1'700'000'000 * kNsPerSec;
constexpr double kInf = std::numeric_limits<double>::infinity();

MetricDesc Gauge(std::string name, std::string help, std::string unit = "") {
  return MetricDesc{std::move(name), std::move(help), std::move(unit), MetricType::kGauge, {}};
}
MetricDesc Counter(std::string name, std::string help) {
  return MetricDesc{std::move(name), std::move(help), "", MetricType::kCounter, {}};
}

class ExpositionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open(store::StoreOptions{});
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    store_ = std::move(*s);
  }

  void Put(const MetricDesc& desc, const LabelSet& labels, TimeNs t, double v) {
    auto ref = store_->RegisterSeries(desc, labels);
    ASSERT_TRUE(ref.has_value()) << ref.error().ToString();
    auto ok = store_->Append(*ref, t, v);
    ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  }

  static LabelSet Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
    auto l = LabelSet::From(pairs);
    EXPECT_TRUE(l.has_value());
    return l.value_or(LabelSet());
  }

  std::unique_ptr<store::Store> store_;
};

TEST_F(ExpositionTest, EmptyStoreRendersNothing) { EXPECT_EQ(RenderPrometheusText(*store_, kMinTime), ""); }

TEST_F(ExpositionTest, ExactText) {
  MetricDesc temp =
      Gauge("ithbat_test_temperature_celsius", R"(Die temperature, with a \ backslash)", "celsius");
  MetricDesc errors = Counter("ithbat_test_errors_total", "Errors seen");
  MetricDesc up = Gauge("ithbat_test_up", "Whether the thing is up");
  // Registered out of order: the output sorts families by name and series by labels.
  Put(up, LabelSet(), kT0, 1);
  Put(temp, Labels({{"gpu", "1"}}), kT0, 71.5);
  Put(temp, Labels({{"gpu", "0"}, {"job", "a\"b\\c\nd"}}), kT0, 68);
  Put(temp, Labels({{"gpu", "0"}}), kT0, -0.25);
  Put(errors, Labels({{"collector", "host"}}), kT0, 3);
  Put(errors, Labels({{"collector", "host"}}), kT0 + kNsPerSec, 1e20);

  EXPECT_EQ(RenderPrometheusText(*store_, kMinTime),
            "# HELP ithbat_test_errors_total Errors seen\n"
            "# TYPE ithbat_test_errors_total counter\n"
            "ithbat_test_errors_total{collector=\"host\"} 1e+20\n"
            "# HELP ithbat_test_temperature_celsius Die temperature, with a \\\\ backslash\n"
            "# TYPE ithbat_test_temperature_celsius gauge\n"
            "ithbat_test_temperature_celsius{gpu=\"0\"} -0.25\n"
            "ithbat_test_temperature_celsius{gpu=\"0\",job=\"a\\\"b\\\\c\\nd\"} 68\n"
            "ithbat_test_temperature_celsius{gpu=\"1\"} 71.5\n"
            "# HELP ithbat_test_up Whether the thing is up\n"
            "# TYPE ithbat_test_up gauge\n"
            "ithbat_test_up 1\n");
}

TEST_F(ExpositionTest, StaleSeriesAndEmptyFamiliesAreLeftOut) {
  MetricDesc a = Gauge("ithbat_test_a", "A");
  MetricDesc b = Gauge("ithbat_test_b", "B");
  Put(a, Labels({{"x", "old"}}), kT0, 1);
  Put(a, Labels({{"x", "new"}}), kT0 + 100 * kNsPerSec, 2);
  Put(b, Labels({{"x", "old"}}), kT0, 3);
  EXPECT_EQ(RenderPrometheusText(*store_, kT0 + 50 * kNsPerSec),
            "# HELP ithbat_test_a A\n"
            "# TYPE ithbat_test_a gauge\n"
            "ithbat_test_a{x=\"new\"} 2\n");
}

TEST_F(ExpositionTest, SpecialValues) {
  MetricDesc g = Gauge("ithbat_test_value", "Value");
  Put(g, Labels({{"k", "nan"}}), kT0, std::nan(""));
  Put(g, Labels({{"k", "pinf"}}), kT0, kInf);
  Put(g, Labels({{"k", "ninf"}}), kT0, -kInf);
  Put(g, Labels({{"k", "tiny"}}), kT0, 5e-324);
  std::string text = RenderPrometheusText(*store_, kMinTime);
  EXPECT_NE(text.find("ithbat_test_value{k=\"nan\"} NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ithbat_test_value{k=\"pinf\"} +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ithbat_test_value{k=\"ninf\"} -Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ithbat_test_value{k=\"tiny\"} 5e-324\n"), std::string::npos) << text;
}

TEST_F(ExpositionTest, TargetLabelsGoOnEverySeriesThatLacksThem) {
  MetricDesc a = Gauge("ithbat_test_a", "A");
  Put(a, LabelSet(), kT0, 1);
  Put(a, Labels({{"gpu", "0"}}), kT0, 2);
  Put(a, Labels({{"node", "its-own"}}), kT0, 3);  // a series that names its node keeps it
  ExpositionOptions o;
  o.target_labels = {{"cluster", "lab-a"}, {"node", "n17"}, {"unset", ""}};
  EXPECT_EQ(RenderPrometheusText(*store_, kMinTime, o),
            "# HELP ithbat_test_a A\n"
            "# TYPE ithbat_test_a gauge\n"
            "ithbat_test_a{cluster=\"lab-a\",node=\"n17\"} 1\n"
            "ithbat_test_a{gpu=\"0\",cluster=\"lab-a\",node=\"n17\"} 2\n"
            "ithbat_test_a{node=\"its-own\",cluster=\"lab-a\"} 3\n");
}

class DcgmNamesTest : public ExpositionTest {
 protected:
  // One H100 as the GPU collector stores it, and a MIG device carved from a second one.
  void PutGpus() {
    MetricDesc info = Gauge("ithbat_gpu_info", "info");
    Put(info,
        Labels({{"gpu", "0"},
                {"gpu_uuid", "GPU-aaaa"},
                {"model", "NVIDIA H100 80GB HBM3"},
                {"pci_bus_id", "00000000:1A:00.0"},
                {"driver_version", "550.54.15"}}),
        kT0, 1);
    Put(info,
        Labels({{"gpu", "1"},
                {"gpu_uuid", "GPU-bbbb"},
                {"model", "NVIDIA H100 80GB HBM3"},
                {"pci_bus_id", "00000000:1B:00.0"},
                {"driver_version", "550.54.15"}}),
        kT0, 1);
    Put(info,
        Labels({{"gpu", "1/7/0"},
                {"gpu_uuid", "MIG-cccc"},
                {"parent_gpu", "1"},
                {"model", "MIG 1g.10gb"},
                {"driver_version", "550.54.15"}}),
        kT0, 1);
    MetricDesc clock = Gauge("ithbat_gpu_clock_hertz", "clock", "hertz");
    Put(clock, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}, {"clock", "sm"}}), kT0, 1.98e9);
    Put(clock, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}, {"clock", "memory"}}), kT0, 2.619e9);
    Put(clock, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}, {"clock", "video"}}), kT0, 1.545e9);
    MetricDesc used = Gauge("ithbat_gpu_memory_used_bytes", "used", "bytes");
    Put(used, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}}), kT0, 512.0 * 1024 * 1024);
    Put(used, Labels({{"gpu", "1/7/0"}, {"gpu_uuid", "MIG-cccc"}, {"parent_gpu", "1"}}), kT0,
        1024.0 * 1024 * 1024);
    MetricDesc ecc = Counter("ithbat_gpu_ecc_errors_total", "ecc");
    Put(ecc, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}, {"type", "corrected"}, {"counter", "volatile"}}),
        kT0, 3);
    Put(ecc,
        Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}, {"type", "uncorrected"}, {"counter", "volatile"}}),
        kT0, 1);
    MetricDesc util = Gauge("ithbat_gpu_utilization_ratio", "util", "ratio");
    Put(util, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}}), kT0, 0.97);
  }

  static std::string Dcgm(const std::string& text) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.find("DCGM_") != std::string::npos) out += line + "\n";
    }
    return out;
  }
};

TEST_F(DcgmNamesTest, OffByDefault) {
  PutGpus();
  EXPECT_EQ(Dcgm(RenderPrometheusText(*store_, kMinTime)), "");
}

TEST_F(DcgmNamesTest, GpuCountersUnderDcgmExporterNamesLabelsAndUnits) {
  PutGpus();
  ExpositionOptions o;
  o.dcgm_names = true;
  o.hostname = "gpu-node-07";
  o.target_labels = {{"cluster", "lab-a"}};
  const std::string gpu0 =
      R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:1A:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",)"
      R"(Hostname="gpu-node-07",DCGM_FI_DRIVER_VERSION="550.54.15",cluster="lab-a")";
  // The MIG device carries its parent's index, UUID and model, and its GPU instance as GPU_I_ID.
  const std::string mig =
      R"(gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:1B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",)"
      R"(GPU_I_ID="7",Hostname="gpu-node-07",DCGM_FI_DRIVER_VERSION="550.54.15",cluster="lab-a")";
  EXPECT_EQ(Dcgm(RenderPrometheusText(*store_, kMinTime, o)),
            "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Uncorrectable (double-bit) ECC errors since the driver was "
            "loaded\n"
            "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" +
                gpu0 +
                "} 1\n"
                "# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Corrected (single-bit) ECC errors since the driver was "
                "loaded\n"
                "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n"
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{" +
                gpu0 +
                "} 3\n"
                "# HELP DCGM_FI_DEV_FB_USED Device memory allocated by applications (MiB)\n"
                "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
                "DCGM_FI_DEV_FB_USED{" +
                gpu0 +
                "} 512\n"
                "DCGM_FI_DEV_FB_USED{" +
                mig +
                "} 1024\n"
                "# HELP DCGM_FI_DEV_GPU_UTIL Share of the sample period a kernel ran on the GPU (%)\n"
                "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                "DCGM_FI_DEV_GPU_UTIL{" +
                gpu0 +
                "} 97\n"
                "# HELP DCGM_FI_DEV_MEM_CLOCK Memory clock (MHz)\n"
                "# TYPE DCGM_FI_DEV_MEM_CLOCK gauge\n"
                "DCGM_FI_DEV_MEM_CLOCK{" +
                gpu0 +
                "} 2619\n"
                "# HELP DCGM_FI_DEV_SM_CLOCK SM clock (MHz)\n"
                "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
                "DCGM_FI_DEV_SM_CLOCK{" +
                gpu0 + "} 1980\n");
}

TEST_F(DcgmNamesTest, AGpuWithoutItsInfoSeriesIsNotNamed) {
  // Without ithbat_gpu_info there is no UUID or model to label it with, and a DCGM series
  // without them would match none of the dashboards' selectors: nothing is better.
  MetricDesc temp = Gauge("ithbat_gpu_temperature_celsius", "temp", "celsius");
  Put(temp, Labels({{"gpu", "0"}, {"gpu_uuid", "GPU-aaaa"}}), kT0, 40);
  ExpositionOptions o;
  o.dcgm_names = true;
  EXPECT_EQ(Dcgm(RenderPrometheusText(*store_, kMinTime, o)), "");
}

TEST(DcgmAliasTable, SortedUniqueAndInDcgmUnits) {
  std::string_view previous;
  for (const DcgmAlias& a : DcgmAliases()) {
    EXPECT_LT(previous, a.field) << "sorted, each field once";
    previous = a.field;
    EXPECT_TRUE(a.field.starts_with("DCGM_FI_DEV_") || a.field.starts_with("DCGM_FI_PROF_")) << a.field;
    EXPECT_TRUE(a.source.starts_with("ithbat_gpu_")) << a.source;
    EXPECT_GT(a.scale, 0) << a.field;
    EXPECT_FALSE(a.help.empty()) << a.field;
    // DCGM reports clocks in MHz and memory in MiB; ours are in hertz and bytes.
    if (a.field.ends_with("_CLOCK")) {
      EXPECT_EQ(a.scale, 1e-6) << a.field;
    }
    if (a.field.starts_with("DCGM_FI_DEV_FB_")) {
      EXPECT_EQ(a.scale, 1.0 / (1 << 20)) << a.field;
    }
  }
}

// Runs `promtool check metrics` on the text; returns its exit status and combined output.
std::pair<int, std::string> PromtoolCheck(const std::string& text) {
  ithbat::testing::TempDir dir;
  dir.WriteFile("metrics.txt", text);
  std::string in = (dir.path() / "metrics.txt").string();
  std::string out = (dir.path() / "out.txt").string();
  std::string cmd = "promtool check metrics < '" + in + "' > '" + out + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

TEST_F(ExpositionTest, PromtoolAcceptsTheOutput) {
  // Never skipped: a /metrics that Prometheus cannot parse is the bug this test exists for.
  ASSERT_EQ(std::system("command -v promtool > /dev/null 2>&1"), 0)
      << "promtool not found: install the Debian package 'prometheus' (it provides /usr/bin/promtool)";

  MetricDesc temp =
      Gauge("ithbat_test_temperature_celsius", R"(Temperature with "quotes" and a \ backslash)", "celsius");
  MetricDesc errors = Counter("ithbat_test_errors_total", "Errors seen by the test");
  MetricDesc bytes = Gauge("ithbat_test_memory_used_bytes", "Memory in use", "bytes");
  Put(temp, Labels({{"gpu", "0"}, {"job", "quote\" back\\slash \nnewline"}}), kT0, 68.25);
  Put(temp, Labels({{"gpu", "1"}, {"job", "utf8 é ✓ 😀 \u00a0"}}), kT0, std::nan(""));
  Put(temp, Labels({{"gpu", "2"}, {"job", "}{,=\"\\\\n"}}), kT0, kInf);
  Put(temp, Labels({{"gpu", "3"}}), kT0, -kInf);
  Put(errors, Labels({{"collector", "host"}}), kT0, 0);
  Put(errors, Labels({{"collector", "nvml"}}), kT0, 18446744073709551616.0);
  Put(bytes, LabelSet(), kT0, 1.5e-7);

  std::string text = RenderPrometheusText(*store_, kMinTime);
  ASSERT_FALSE(text.empty());
  auto [rc, output] = PromtoolCheck(text);
  EXPECT_EQ(rc, 0) << "promtool output:\n" << output << "\ninput:\n" << text;
  EXPECT_EQ(output, "") << "promtool lint complaints:\n" << output << "\ninput:\n" << text;
}

TEST(PromtoolSanityTest, RejectsBrokenText) {
  // Guards the test above: promtool must actually fail on bad input, or a pass means nothing.
  ASSERT_EQ(std::system("command -v promtool > /dev/null 2>&1"), 0)
      << "promtool not found: install the Debian package 'prometheus' (it provides /usr/bin/promtool)";
  auto [rc, output] = PromtoolCheck("ithbat_bad{job=\"unterminated} 1\n");
  EXPECT_NE(rc, 0) << output;
  auto [rc2, output2] = PromtoolCheck("# TYPE ithbat_no_suffix counter\nithbat_no_suffix 1\n");
  EXPECT_NE(rc2, 0) << output2;
  EXPECT_NE(output2, "");
}

}  // namespace
}  // namespace ithbat::serve
