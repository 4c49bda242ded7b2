// The rank's lines in each framework's format, read back by the agent's own parsers
// (src/collect/joblog/parsers): what the simulator prints must be what the agent understands.
#include "workload/log_formats.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"

namespace ithbat::sim::workload {
namespace {

using collect::joblog::LineView;
using collect::joblog::ParsedEvent;
using collect::joblog::StreamParser;
using collect::joblog::StreamParserOptions;

struct Parsed {
  std::string framework;
  std::map<int64_t, double> loss;   // step -> loss
  std::vector<int64_t> steps;
  std::vector<int64_t> saves;       // checkpoint_begin steps
  int save_ends = 0;
  int nan_errors = 0;
};

// Feeds lines as the capture delivers them: '\r' refreshes as progress segments, '\n' lines whole.
void Feed(StreamParser& p, const std::vector<LogLine>& lines, std::vector<ParsedEvent>& out) {
  for (const auto& l : lines) {
    std::string_view t = l.text;
    if (!t.empty() && t.front() == '\r') {
      p.Parse(LineView{t.substr(1), true, l.fd}, out);
      continue;
    }
    while (!t.empty()) {
      const size_t nl = t.find('\n');
      const std::string_view line = t.substr(0, nl);
      if (!line.empty()) p.Parse(LineView{line, false, l.fd}, out);
      if (nl == std::string_view::npos) break;
      t.remove_prefix(nl + 1);
    }
  }
}

Parsed PrintAndParse(scenario::LogFormat format, bool with_nan = false) {
  TrainSpec spec;
  spec.recipe_fingerprint = "c0ffee";
  spec.steps = 20;
  spec.log.format = format;
  spec.world_size = spec.dp = 1;
  LogFormatter f(format, 0);
  auto p = StreamParser::Create(StreamParserOptions{});
  EXPECT_TRUE(p);
  std::vector<ParsedEvent> ev;
  const int64_t t0 = 1'790'000'000'000'000'000;
  Feed(*p, f.Header(spec, t0), ev);
  for (int64_t s = 1; s <= 20; ++s) {
    StepReport r;
    r.step = s;
    r.total_steps = 20;
    r.loss = with_nan && s >= 15 ? std::nan("") : 10.0 - 0.25 * static_cast<double>(s);
    r.grad_norm = 1.5;
    r.lr = 3e-4;
    r.step_ms = 500;
    r.tokens = 16384;
    r.sequences = 8;
    r.elapsed_s = 0.5 * static_cast<double>(s);
    r.epoch = static_cast<double>(s) / 20;
    r.memory_gib = 40;
    r.memory_share = 0.5;
    r.mfu = 0.4;
    r.tflops = 400;
    const int64_t now = t0 + s * 500'000'000;
    Feed(*p, f.Progress(r), ev);
    const bool log = format == scenario::LogFormat::kNanogpt ? (s - 1) % 5 == 0 : s % 5 == 0;
    if (log) Feed(*p, f.Metrics(r, now), ev);
    if (s % 10 == 0) {
      CheckpointReport c{s, "/ckpt/job/" + CheckpointDirName(format, s), false, 1.25};
      Feed(*p, f.SaveBegin(c, r, now), ev);
      Feed(*p, f.SaveEnd(c, now), ev);
    }
  }
  Parsed out;
  out.framework = std::string(p->framework());
  for (const auto& e : ev) {
    switch (e.kind) {
      case EventKind::kStep: out.steps.push_back(e.step); break;
      case EventKind::kLoss:
        if (e.step >= 0) out.loss[e.step] = e.value;
        break;
      case EventKind::kCheckpointBegin: out.saves.push_back(e.step); break;
      case EventKind::kCheckpointEnd: ++out.save_ends; break;
      case EventKind::kError:
        if (e.name == "nan_loss") ++out.nan_errors;
        break;
      default: break;
    }
  }
  return out;
}

TEST(LogFormats, HfTrainerBarDictsAndSaves) {
  const Parsed p = PrintAndParse(scenario::LogFormat::kHfTrainer);
  EXPECT_EQ(p.framework, "hf_trainer");
  EXPECT_EQ(p.steps.size(), 20u);
  EXPECT_EQ(p.steps.back(), 20);
  // The first dict across fds is not trusted with the bar's step (parser rule); the rest are.
  ASSERT_TRUE(p.loss.contains(10));
  EXPECT_NEAR(p.loss.at(10), 7.5, 1e-4);
  EXPECT_NEAR(p.loss.at(20), 5.0, 1e-4);
  EXPECT_EQ(p.saves, (std::vector<int64_t>{10, 20}));
}

TEST(LogFormats, Megatron) {
  const Parsed p = PrintAndParse(scenario::LogFormat::kMegatron);
  EXPECT_EQ(p.framework, "megatron");
  EXPECT_EQ(p.steps, (std::vector<int64_t>{5, 10, 15, 20}));
  EXPECT_NEAR(p.loss.at(5), 8.75, 1e-6);
  EXPECT_NEAR(p.loss.at(20), 5.0, 1e-6);
  EXPECT_EQ(p.saves, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(p.save_ends, 2);
}

TEST(LogFormats, Torchtitan) {
  const Parsed p = PrintAndParse(scenario::LogFormat::kTorchtitan);
  EXPECT_EQ(p.framework, "torchtitan");
  EXPECT_EQ(p.steps, (std::vector<int64_t>{5, 10, 15, 20}));
  EXPECT_NEAR(p.loss.at(15), 6.25, 1e-5);
  EXPECT_EQ(p.saves.size(), 2u);  // torchtitan's save lines carry no step
  EXPECT_EQ(p.save_ends, 2);
}

TEST(LogFormats, NanoGptCountsFromIterZero) {
  const Parsed p = PrintAndParse(scenario::LogFormat::kNanogpt);
  EXPECT_EQ(p.framework, "nanogpt");
  // nanoGPT prints "iter N" after its (N+1)-th step: completed step s shows as iter s-1.
  EXPECT_EQ(p.steps, (std::vector<int64_t>{0, 5, 10, 15}));
  EXPECT_NEAR(p.loss.at(5), 10.0 - 0.25 * 6, 1e-4);
  EXPECT_EQ(p.saves, (std::vector<int64_t>{10, 20}));  // the eval line before a save names the step
}

TEST(LogFormats, NanLossIsSeenInEveryFormat) {
  for (auto f : {scenario::LogFormat::kHfTrainer, scenario::LogFormat::kMegatron, scenario::LogFormat::kTorchtitan,
                 scenario::LogFormat::kNanogpt}) {
    const Parsed p = PrintAndParse(f, true);
    bool nan = false;
    for (const auto& [s, v] : p.loss) nan |= std::isnan(v);
    EXPECT_TRUE(nan || p.nan_errors > 0) << scenario::EnumName(f);
  }
}

TEST(LogFormats, PythonFloatRepr) {
  EXPECT_EQ(PyFloat(2.593330622204148e-05), "2.593330622204148e-05");
  EXPECT_EQ(PyFloat(0.0003), "0.0003");
  EXPECT_EQ(PyFloat(100.0), "100.0");
  EXPECT_EQ(PyFloat(std::nan("")), "nan");
  EXPECT_EQ(PyRound(1.328849, 4), "1.3288");
}

}  // namespace
}  // namespace ithbat::sim::workload
