// The /metrics text: exact output for a small store, and the real Prometheus parser/linter
// (promtool) accepting output with every awkward value the store can hold.
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
