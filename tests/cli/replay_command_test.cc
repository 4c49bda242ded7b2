// `ithbat replay`: the diagnosis engine over real material someone handed over (../shared/data),
// offline. Each test names what the material shows and checks the replay says it — and no more:
// a log alone is one collector, so every diagnosis here is inconclusive and names what is missing.
#include "cli/replay_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "investigate/diagnosis_json.h"
#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

using ::testing::HasSubstr;

// A copy of ../shared/data/<relative> without its '#' header lines, as the job wrote it.
std::string Material(const testing::TempDir& dir, const std::string& relative) {
  std::string body;
  for (const auto& line : testing::SharedDataLines(relative)) body += line + "\n";
  const std::string name = relative.substr(relative.rfind('/') + 1);
  dir.WriteFile(name, body);
  return (dir.path() / name).string();
}

std::set<int32_t> Ranks(const Diagnosis& d) {
  std::set<int32_t> r;
  for (const auto& x : d.subjects.ranks) r.insert(x.rank);
  return r;
}

struct CommandRun {
  int rc = -1;
  std::string out, err;
};

// RunReplayCommand with its stdout and stderr captured.
CommandRun RunCommand(const ReplayCommandOptions& o) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  CommandRun r;
  r.rc = RunReplayCommand(o, out, err);
  for (auto [f, text] : {std::pair{out, &r.out}, std::pair{err, &r.err}}) {
    std::rewind(f);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text->append(buf, n);
    std::fclose(f);
  }
  return r;
}

// A UTC civil time as ns since the epoch.
TimeNs CivilUtc(int y, unsigned mo, unsigned d, int h, int mi, int s, int64_t ns) {
  using namespace std::chrono;
  const int64_t days = sys_days{year{y} / month{mo} / day{d}}.time_since_epoch().count();
  return ((days * 24 + h) * 60 + mi) * 60 * kNsPerSec + s * kNsPerSec + ns;
}

Diagnosis Only(const ReplayResult& r) {
  EXPECT_EQ(r.diagnoses.size(), 1u);
  return r.diagnoses.empty() ? Diagnosis{} : r.diagnoses.front();
}

TEST(ReplayCommand, NcclWatchdogTimeoutNamesTheRanksThatNeverArrived) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt")};
  o.world_size = 8;
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kHang);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);  // the job's output alone is one collector
  // Ranks 0, 4 and 3 timed out in _REDUCE_SCATTER_BASE #7753; the others of 8 printed nothing.
  EXPECT_EQ(Ranks(d), (std::set<int32_t>{1, 2, 5, 6, 7}));
  EXPECT_THAT(d.summary, HasSubstr("#7753 (_REDUCE_SCATTER_BASE)"));
  std::set<std::string> waited;
  for (const auto& e : d.evidence) waited.insert(e.subject);
  EXPECT_EQ(waited, (std::set<std::string>{"rank 0", "rank 3", "rank 4"}));

  // Without the world size nobody can be named: the replay says so instead of guessing.
  o.world_size = -1;
  auto unknown = Replay(o);
  ASSERT_TRUE(unknown.has_value());
  const Diagnosis u = Only(*unknown);
  EXPECT_TRUE(u.subjects.ranks.empty());
  EXPECT_THAT(u.summary, HasSubstr("world size is unknown"));
}

TEST(ReplayCommand, FallenOffTheBusIsAGpuHardwareFaultSeenInTheKernelLogOnly) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.kmsg = {Material(dir, "xid/bumblebee-issue554-fallen-off-bus-legacy.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kGpuHardware);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_THAT(d.summary, HasSubstr("Xid 79"));
  EXPECT_THAT(d.summary, HasSubstr("seen by the kernel log only"));
  ASSERT_EQ(d.subjects.gpus.size(), 1u);
  EXPECT_EQ(d.subjects.gpus[0].index, 0);
  EXPECT_EQ(r->gpus.at("00000000:01:00.0"), 0);
}

TEST(ReplayCommand, AnNvswitchSxidIsNoGpu) {
  testing::TempDir dir;
  dir.WriteFile("kern.log",
                "[ 1234.000001] nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 46 LTSSM Fault Up\n");
  ReplayCommandOptions o;
  o.kmsg = {(dir.path() / "kern.log").string()};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->gpus.empty());
  EXPECT_TRUE(r->diagnoses.empty());
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].errors.count("sxid 20034"), 1u);
}

TEST(ReplayCommand, GspTimeoutsAreTheDrivers) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.kmsg = {Material(dir, "xid/gpud-testdata-dmesg-xid-119-gsp-timeout.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kDriver);
  EXPECT_THAT(d.summary, HasSubstr("Xid 119"));
}

TEST(ReplayCommand, AMegatronLossThatVanishedIsADivergenceTheHardwareIsNotClearedOf) {
  // "grad norm: nan" and no lm loss on three iterations, Megatron's NaN counter at 0.
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "training/megatron-deepspeed-bigscience-issue396-grad-norm-nan.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_EQ(d.cause, Cause::kUnknown);  // nothing clears the GPUs: not even "recipe suspected"
  EXPECT_THAT(d.summary, HasSubstr("diverged at step 5426"));
  EXPECT_THAT(d.summary, HasSubstr("no GPU is known for its ranks"));
}

TEST(ReplayCommand, InfinibandRetriesExhaustedSuspectTheNetworkOrTheDeadPeer) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "nccl/nccl-issue1405-ib-completion-ipv6-gid.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kNetwork);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_THAT(d.summary, HasSubstr("IBV_WC_RETRY_EXC_ERR"));
  EXPECT_THAT(d.summary, HasSubstr("or a peer that died"));
}

TEST(ReplayCommand, ALocalProtectionErrorIsNotTheFabric) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "nccl/nccl-issue928-ib-old-format-error4-h100.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kUnknown);
  EXPECT_THAT(d.summary, HasSubstr("not the fabric"));
}

TEST(ReplayCommand, CudaOomWithoutGpuDataIsAnInconclusiveOutOfMemory) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "training/cuda-oom-message-variants.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kOutOfMemory);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  ASSERT_FALSE(d.evidence.empty());
  EXPECT_THAT(d.evidence[0].note, HasSubstr("whether it was fatal is unknown"));
}

TEST(ReplayCommand, HealthyRunsGiveNoDiagnosis) {
  testing::TempDir dir;
  for (const char* healthy :
       {"training/megatron-llm-issue11-iterations.txt", "training/torchtitan-pr3393-grad-norm-format.txt",
        "training/nanogpt-issue178-healthy-start-mfu-minus100.txt",
        "training/lightning-issue3866-colab-style-bar-train-loss.txt"}) {
    ReplayCommandOptions o;
    o.logs = {Material(dir, healthy)};
    auto r = Replay(o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_TRUE(r->diagnoses.empty()) << healthy << ": " << r->diagnoses.front().summary;
    EXPECT_GT(r->events, 0u) << healthy;
  }
}

// The lines of ../shared/data/<relative> that contain `part`, as one log (a section of a file that
// gathers several servers' excerpts).
std::string Section(const testing::TempDir& dir, const std::string& relative, const std::string& part,
                    const std::string& name) {
  std::string body;
  for (const auto& line : testing::SharedDataLines(relative)) {
    if (line.find(part) != std::string::npos) body += line + "\n";
  }
  EXPECT_FALSE(body.empty()) << relative << " has no line with " << part;
  dir.WriteFile(name, body);
  return (dir.path() / name).string();
}

TEST(ReplayCommand, ASaturatedSglangServerIsAtCapacityButOneLineIsNoPattern) {
  // sglang #938: "#running-req: 1010, ..., token usage: 0.93, ..., #queue-req: 12279" — one line.
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Section(dir, "serving/sglang-decode-batch-log-formats.txt", "#queue-req: 12279", "sglang.log")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kUnderProvisioned);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_THAT(d.summary, HasSubstr("the KV cache was 93% full"));
  EXPECT_THAT(d.summary, HasSubstr("12279.0 waiting, 1010.0 running"));
  EXPECT_THAT(d.summary, HasSubstr("1 stats line only: a pattern needs 5 in a row"));
  EXPECT_THAT(d.summary, HasSubstr("GPU counters"));
  for (const auto& e : d.evidence) EXPECT_EQ(e.collector, "joblog") << e.signal;
}

TEST(ReplayCommand, AVllmQueueWithoutASlotLimitIsNotBlamedOnTheConfiguration) {
  // vLLM #8719 (V0: Running 16, Pending 11, KV 87.1%) and #19680 (early V1: Running 10,
  // Waiting 4, KV 57.9%): a queue, a cache not full, no slot limit printed — which of the
  // configuration or the load caps the server is not known, and the replay says so.
  for (const auto& [part, running] :
       {std::pair{"Pending: 11 reqs", "16.0 running"}, std::pair{"Waiting: 4 reqs", "10.0 running"}}) {
    testing::TempDir dir;
    ReplayCommandOptions o;
    o.logs = {Section(dir, "serving/vllm-v0-engine-log-formats-swapped-pending.txt", part, "vllm.log")};
    auto r = Replay(o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    const Diagnosis d = Only(*r);
    EXPECT_EQ(d.cause, Cause::kServingConfig) << part;
    EXPECT_EQ(d.verdict, Verdict::kInconclusive) << part;
    EXPECT_THAT(d.summary, HasSubstr("exposes no slot limit"));
    EXPECT_THAT(d.summary, HasSubstr(running));
  }
}

TEST(ReplayCommand, AnSglangServerWithoutAQueueGivesNothing) {
  testing::TempDir dir;
  for (const char* part : {"[04:40:5", "TP0] Decode batch, #running-req: 5", "Prefill batch"}) {
    ReplayCommandOptions o;
    o.logs = {Section(dir, "serving/sglang-decode-batch-log-formats.txt", part, "idle.log")};
    auto r = Replay(o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_TRUE(r->diagnoses.empty()) << part << ": " << r->diagnoses.front().summary;
    EXPECT_GT(r->events, 0u) << part;
  }
}

// Saved /metrics bodies of real servers (../shared/data/serving), each one scrape: every one of
// them idle or nearly (a queue of 0), so none is a diagnosis — but each is read as the serving
// collector reads a scrape: its engine told by its names, its series the agent's.
TEST(ReplayCommand, RealScrapesOfIdleServersAreReadAndGiveNothing) {
  for (const auto& [file, engine] :
       {std::pair{"serving/vllm-docs-design-metrics-example-output.txt", "vllm"},
        std::pair{"serving/production-stack-issue318-vllm-v0-metrics.txt", "vllm"},
        std::pair{"serving/production-stack-issue617-vllm-0.10-v1-metrics.txt", "vllm"},
        std::pair{"serving/sglang-pr4444-metrics.txt", "sglang"},
        std::pair{"serving/tgi-metrics-tgis-compat-ibm-vllm-pr18.txt", "tgi"}}) {
    testing::TempDir dir;
    ReplayCommandOptions o;
    o.scrapes = {Material(dir, file)};
    auto r = Replay(o);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    ASSERT_EQ(r->files.size(), 1u);
    EXPECT_TRUE(r->files[0].failure.empty()) << file << ": " << r->files[0].failure;
    EXPECT_EQ(r->files[0].framework, engine) << file;
    EXPECT_EQ(r->scrapes, 1u) << file;
    EXPECT_TRUE(r->diagnoses.empty()) << file << ": " << r->diagnoses.front().summary;
    // The server is there, up at the scrape's time, under the serving collector's names.
    bool up = false;
    for (const auto& [v, samples] : r->view.Samples("", "ithbat_serving_up", kMinTime, kMaxTime)) {
      up = up || (!samples.empty() && samples.front().v == 1 && samples.front().t == kReplayStart);
    }
    EXPECT_TRUE(up) << file;
  }
}

TEST(ReplayCommand, AScrapeOfNoInferenceServerIsSaidToHoldNone) {
  // A DCGM exporter's output holds GPU fields, not a server's: read, named, not used.
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.scrapes = {Material(dir, "dcgm/dcgm-exporter-issue250-v100-gpu-util-pcie-replay.txt")};
  const CommandRun run = RunCommand(o);
  EXPECT_EQ(run.rc, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("no inference server's metrics (vllm:, sglang: or tgi_ names): not used"));
  EXPECT_THAT(run.out, HasSubstr("evidence held: none"));
}

// Successive scrapes of one vLLM v1 server (the names and labels of the vLLM docs' example
// output; the values are a saturated server's, written for this test): a queue on every scrape
// with the KV cache 97 % full. /metrics is one collector: under-provisioned, inconclusive, the
// GPU counters named as missing.
TEST(ReplayCommand, SuccessiveScrapesOfASaturatedServerAreItsQueueOverTime) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "metrics-" + std::to_string(i) + ".txt";
    dir.WriteFile(
        name,
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 48.0\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} " +
            std::to_string(100 + 20 * i) +
            ".0\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.97\n");
    o.scrapes.push_back((dir.path() / name).string());
  }
  o.interval_seconds = 10;
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->scrapes, 8u);
  EXPECT_EQ(r->end, kReplayStart + 70 * kNsPerSec);
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kUnderProvisioned);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_THAT(d.summary, HasSubstr("97% full"));
  EXPECT_THAT(d.summary, HasSubstr("GPU counters"));
  for (const auto& e : d.evidence) EXPECT_EQ(e.collector, "serving") << e.signal;

  const CommandRun run = RunCommand(o);
  EXPECT_EQ(run.rc, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("lines and scrapes 10 s apart"));
  EXPECT_THAT(run.out, HasSubstr("vllm /metrics"));
  EXPECT_THAT(run.out, HasSubstr("evidence held: serving."));
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("serving (inference servers' /metrics)")));
}

TEST(ReplayCommand, AScrapeThatCannotBeReadIsNamedAndTheRestReplayed) {
  testing::TempDir dir;
  dir.WriteFile("huge.txt", std::string(9 << 20, '#'));  // over the agent's 8 MiB body bound
  ReplayCommandOptions o;
  o.scrapes = {(dir.path() / "missing.txt").string(), (dir.path() / "huge.txt").string(),
               Material(dir, "serving/sglang-pr4444-metrics.txt")};
  const CommandRun run = RunCommand(o);
  EXPECT_EQ(run.rc, 1);
  EXPECT_THAT(run.err, HasSubstr("missing.txt"));
  EXPECT_THAT(run.err, HasSubstr("huge.txt"));
  EXPECT_THAT(run.out, HasSubstr("sglang /metrics"));
}

TEST(ReplayCommand, LinesAreDatedByTheirNumberFromAPlainlySyntheticStart) {
  testing::TempDir dir;
  dir.WriteFile("a.log", "iter 1: loss 4.0, time 100.00ms\niter 2: loss 3.9, time 100.00ms\n");
  ReplayCommandOptions o;
  o.logs = {(dir.path() / "a.log").string()};
  o.interval_seconds = 2;
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->start, kReplayStart);
  EXPECT_EQ(r->end, kReplayStart + 2 * kNsPerSec);
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  auto events = r->view.Events(q);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].time, kReplayStart);
  EXPECT_EQ(events[1].time, kReplayStart + 2 * kNsPerSec);
  EXPECT_EQ(events[0].identity.job, "replay");
  EXPECT_EQ(events[0].source, "joblog");
  // The step timeline is rebuilt as the agent builds it (collect/joblog/step_spans.h).
  EXPECT_EQ(r->view.Steps("replay", "replay", -1, kMinTime, kMaxTime).size(), 2u);
}

// --times stamps: a file whose lines carry stamps is dated by them, so the replay's times and
// durations are the job's; a file without stamps is dated by number from the earliest stamp.
TEST(ReplayCommand, StampedLinesAreDatedByTheirOwnTime) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.times = "stamps";
  o.logs = {Material(dir, "training/torchtitan-pr3393-grad-norm-format.txt"),
            Material(dir, "training/nanogpt-issue110-old-format-no-mfu.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->files.size(), 2u);
  // torchtitan's first line: "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14 ...".
  const TimeNs first = CivilUtc(2026, 5, 18, 16, 4, 46, 338'000'000);
  EXPECT_EQ(r->start, first);
  EXPECT_EQ(r->files[0].first_time, first);
  EXPECT_GT(r->files[0].stamped, 1u);
  EXPECT_GT(r->files[0].last_time, first);
  EXPECT_EQ(r->files[1].first_time, 0);  // nanoGPT prints no time
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  std::map<int32_t, std::vector<TimeNs>> by_stream;
  for (const Event& e : r->view.Events(q)) by_stream[e.identity.pid].push_back(e.time);
  ASSERT_EQ(by_stream.size(), 2u);
  // The torchtitan stream's first loss is at its stamp; nanoGPT's lines count from the same origin.
  EXPECT_EQ(by_stream[1].front(), first);
  EXPECT_EQ(by_stream[2].front(), first);
  EXPECT_EQ(by_stream[2][1], first + kNsPerSec);
  for (const auto& [pid, times] : by_stream) EXPECT_TRUE(std::is_sorted(times.begin(), times.end())) << pid;

  const CommandRun run = RunCommand(o);
  EXPECT_EQ(run.rc, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("dated by the lines' own stamps"));
  EXPECT_THAT(run.out, HasSubstr("no stamp in its first 1000 lines: dated by line number"));
}

TEST(ReplayCommand, StampsChangeTheTimesNotTheConclusions) {
  // The watchdog of llamafactory #6269 is stamped "[E1206 18:44:12.715…]" (no year): the same
  // hang, its ranks named, at December 6 of the stamp year.
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.times = "stamps";
  o.world_size = 8;
  o.logs = {Material(dir, "nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt")};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->start, CivilUtc(2000, 12, 6, 18, 44, 12, 715'298'746));
  const Diagnosis d = Only(*r);
  EXPECT_EQ(d.cause, Cause::kHang);
  EXPECT_EQ(d.verdict, Verdict::kInconclusive);
  EXPECT_EQ(Ranks(d), (std::set<int32_t>{1, 2, 5, 6, 7}));
  // Healthy stamped runs stay healthy.
  for (const char* file :
       {"training/fairseq-issue2681-train-inner.txt", "training/torchtitan-pr3393-grad-norm-format.txt",
        "training/megatron-bridge-issue4024-moe-mtp-losses.txt"}) {
    ReplayCommandOptions h;
    h.times = "stamps";
    h.logs = {Material(dir, file)};
    auto hr = Replay(h);
    ASSERT_TRUE(hr.has_value()) << hr.error().message;
    EXPECT_GT(hr->files[0].stamped, 0u) << file;
    EXPECT_TRUE(hr->diagnoses.empty()) << file << ": " << hr->diagnoses.front().summary;
  }
  ReplayCommandOptions bad;
  bad.logs = {"/dev/null"};
  bad.times = "wall";
  EXPECT_FALSE(Replay(bad).has_value());
}

TEST(ReplayCommand, RanksOfOneFileAreStreamsOfTheirOwn) {
  testing::TempDir dir;
  dir.WriteFile("a.log",
                "[rank0]: iter 1: loss 4.0, time 100.00ms\n"
                "[rank1]: iter 1: loss 4.1, time 100.00ms\n");
  ReplayCommandOptions o;
  o.logs = {(dir.path() / "a.log").string()};
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value());
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  auto events = r->view.Events(q);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[0].identity.pid, events[1].identity.pid);
  EXPECT_EQ(events[1].identity.rank, 1);
}

TEST(ReplayCommand, BadInputIsAClearErrorAndLosesNothing) {
  EXPECT_FALSE(Replay(ReplayCommandOptions{}).has_value());
  ReplayCommandOptions bad_interval;
  bad_interval.logs = {"/dev/null"};
  bad_interval.interval_seconds = 0;
  EXPECT_FALSE(Replay(bad_interval).has_value());
  ReplayCommandOptions bad_format;
  bad_format.logs = {"/dev/null"};
  bad_format.format = "no-such-format";
  EXPECT_FALSE(Replay(bad_format).has_value());

  // A file that cannot be read is named (exit 1); the others are replayed.
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {(dir.path() / "missing.log").string(),
            Material(dir, "nccl/llamafactory-issue7396-watchdog-allreduce.txt")};
  const CommandRun run = RunCommand(o);
  EXPECT_EQ(run.rc, 1);
  const std::string& text = run.out;
  const std::string& errors = run.err;
  EXPECT_THAT(errors, HasSubstr("missing.log"));
  EXPECT_THAT(text, HasSubstr("inconclusive: hang"));
  EXPECT_THAT(text, HasSubstr("A verdict needs two collectors"));
}

TEST(ReplayCommand, TheEventBoundKeepsTheNewestAndCountsTheRest) {
  testing::TempDir dir;
  std::string body;
  for (int i = 1; i <= 50; ++i) body += "iter " + std::to_string(i) + ": loss 4.0, time 100.00ms\n";
  dir.WriteFile("long.log", body);
  ReplayCommandOptions o;
  o.logs = {(dir.path() / "long.log").string()};
  o.max_events = 20;
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->events, 20u);
  EXPECT_EQ(r->dropped, 80u);  // 50 lines give a step and a loss each
  store::EventQuery q;
  q.kinds = {EventKind::kLoss};
  auto kept = r->view.Events(q);
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.back().step, 50);
}

TEST(ReplayCommand, HostileMaterialIsBounded) {
  // A kernel log naming a new Xid code on every line: the tally stops growing at its bound.
  testing::TempDir dir;
  std::string body;
  for (int code = 1; code <= 400; ++code)
    body += "NVRM: Xid (PCI:0000:3b:00): " + std::to_string(code) + ", pid=1, name=python, Ch 00000008\n";
  dir.WriteFile("kern.log", body);
  ReplayCommandOptions o;
  o.kmsg = {(dir.path() / "kern.log").string()};
  o.interval_seconds = 3600;
  auto r = Replay(o);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].errors.size(), kReplayMaxTallyKeys + 1);
  EXPECT_GT(r->files[0].errors.at("other"), 0u);
  EXPECT_EQ(r->end, kReplayStart + 399LL * 3600 * kNsPerSec);
}

TEST(ReplayCommand, JsonLinesAreSchemaV1) {
  testing::TempDir dir;
  ReplayCommandOptions o;
  o.logs = {Material(dir, "nccl/ofa-issue271-watchdog-old-format-1800s.txt")};
  o.kmsg = {Material(dir, "xid/gpud-pr46-xid13-xid109-dmesg-ctime.txt")};
  o.json = true;
  const CommandRun run = RunCommand(o);
  ASSERT_EQ(run.rc, 0) << run.err;
  const std::string& text = run.out;
  size_t lines = 0, start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    auto j = nlohmann::json::parse(text.substr(start, end - start));
    EXPECT_TRUE(investigate::ValidateDiagnosisJson(j).has_value()) << j.dump();
    ++lines;
    start = end + 1;
  }
  EXPECT_GE(lines, 1u);
}

}  // namespace
}  // namespace ithbat::cli
