// The GPU collector against the fake libnvidia-ml.so.1 (sim/), driven through the fake's
// shared state: a default node of 8 H100, then faults (lost GPU, hung calls, NOT_SUPPORTED),
// processes coming and going, Xid events. Written to a FakeSink that records everything.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/runtime.h"
#include "collect/gpu/gpu_collector.h"
#include "core/metric.h"
#include "fake_state/fake_state_api.h"
#include "testutil/fake_sink.h"
#include "testutil/testutil.h"

// tests/CMakeLists.txt links ithbat_fake_state into the collect tests, which defines
// ITHBAT_FAKE_NVML_PATH (the built fake libnvidia-ml.so.1) and builds the fake first.
#ifdef ITHBAT_FAKE_NVML_PATH

namespace ithbat::collect {
namespace {

using ::ithbat::testing::FakeSink;
using ::ithbat::testing::TempDir;
using ::testing::HasSubstr;

constexpr TimeNs kT0 = 1'700'000'000 * kNsPerSec;

class GpuFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_path_ = (dir_.path() / "fake_state").string();
    auto st = sim::FakeState::CreateDefault(state_path_, "gpu-test");
    ASSERT_TRUE(st) << st.error().ToString();
    state_ = std::move(*st);
    ASSERT_EQ(setenv(kStateEnv, state_path_.c_str(), 1), 0);
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
    collector_.reset();
    unsetenv(kStateEnv);
  }

  // Creates, inits and starts the collector against the fake.
  void Start(GpuOptions o = {}) {
    o.library = ITHBAT_FAKE_NVML_PATH;
    // Generous: a loaded CI machine must not make a healthy GPU look stalled.
    if (o.gpu_deadline == GpuOptions{}.gpu_deadline) o.gpu_deadline = 10 * kNsPerSec;
    o.event_wait = 50 * kNsPerMs;
    collector_ = GpuCollector::Create(o);
    Status s = collector_->Init(sink_);
    ASSERT_TRUE(s) << s.error().ToString();
    s = collector_->Start();
    ASSERT_TRUE(s) << s.error().ToString();
  }
  // Collects tick n (1 s apart).
  TimeNs Tick(int n) {
    const TimeNs t = kT0 + n * kNsPerSec;
    Status s = collector_->Collect(t);
    EXPECT_TRUE(s) << s.error().ToString();
    return t;
  }

  static constexpr const char* kStateEnv = "ITHBAT_FAKE_STATE";
  TempDir dir_;
  std::string state_path_;
  std::unique_ptr<sim::FakeState> state_;
  FakeSink sink_;
  std::unique_ptr<GpuCollector> collector_;
};

TEST_F(GpuFakeTest, DefaultNodeHasAtLeast850SeriesAllDescribed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(collector_->gpu_count(), 8u);
  Tick(1);
  const TimeNs t2 = Tick(2);  // GPM needs two samples
  EXPECT_GE(sink_.CountWithSamples("ithbat_gpu_"), 850u);

  std::map<std::string, MetricDesc> described;
  for (const MetricDesc& d : collector_->Describe()) described[d.name] = d;
  std::set<std::string> gpus;
  for (const auto& s : sink_.series()) {
    auto it = described.find(s.desc.name);
    ASSERT_NE(it, described.end()) << s.desc.name << " is not in Describe()";
    EXPECT_EQ(it->second.help, s.desc.help);
    EXPECT_FALSE(s.desc.help.empty());
    if (!s.desc.name.starts_with("ithbat_gpu_nvml_call")) {
      ASSERT_TRUE(s.labels.Get("gpu")) << s.desc.name << s.labels.ToString();
      ASSERT_TRUE(s.labels.Get("gpu_uuid")) << s.desc.name << s.labels.ToString();
      gpus.insert(std::string(*s.labels.Get("gpu")));
    }
  }
  EXPECT_EQ(gpus.size(), 8u);

  // Base units: memory in bytes (an H100 has 80 GB), clocks in hertz, activities as ratios.
  auto total = sink_.ValueAt("ithbat_gpu_memory_total_bytes", {{"gpu", "0"}}, t2);
  ASSERT_TRUE(total);
  EXPECT_GT(*total, 64.0 * (1ull << 30));
  auto sm_max = sink_.ValueAt("ithbat_gpu_clock_max_hertz", {{"gpu", "0"}, {"clock", "sm"}}, t2);
  ASSERT_TRUE(sm_max);
  EXPECT_GT(*sm_max, 1e9);
  auto util = sink_.ValueAt("ithbat_gpu_utilization_ratio", {{"gpu", "0"}}, t2);
  ASSERT_TRUE(util);
  EXPECT_GE(*util, 0.0);
  EXPECT_LE(*util, 1.0);
  auto info = sink_.ValueAt("ithbat_gpu_info", {{"gpu", "3"}}, t2);
  ASSERT_TRUE(info);
  EXPECT_EQ(*info, 1.0);
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_gpm_ratio", {{"gpu", "0"}, {"metric", "sm_activity"}}, t2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_nvml_calls_total", {{"family", "power"}}, t2));
  // Healthy node: no lost or stalled GPU.
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_lost", {{"gpu", "5"}}, t2), 0.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_nvml_stalled", {{"gpu", "5"}}, t2), 0.0);
}

TEST_F(GpuFakeTest, NotSupportedIsNeverExportedAndStopsBeingAppended) {
  ASSERT_TRUE(state_->SetNotSupported(0, "nvmlDeviceGetPowerUsage", true));
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "0"}}, t1)) << "not exported as a zero";
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "1"}}, t1));
  // A value that becomes unsupported later stops being appended.
  ASSERT_TRUE(state_->SetNotSupported(1, "nvmlDeviceGetPowerUsage", true));
  const TimeNs t2 = Tick(2);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "1"}}, t2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "2"}}, t2));
  EXPECT_TRUE(collector_->Health().up);
}

TEST_F(GpuFakeTest, MissingOptionalExportDisablesItsSeriesOnly) {
  GpuOptions o;
  o.hidden_symbols = {"nvmlDeviceGetTotalEnergyConsumption"};
  ASSERT_NO_FATAL_FAILURE(Start(o));
  const TimeNs t1 = Tick(1);
  EXPECT_EQ(sink_.CountWithSamples("ithbat_gpu_energy_joules_total"), 0u);
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "0"}}, t1));
  const auto h = collector_->Health();
  EXPECT_TRUE(h.up);
  EXPECT_THAT(h.degraded, HasSubstr("nvmlDeviceGetTotalEnergyConsumption"));
}

TEST_F(GpuFakeTest, LostGpuIsReportedAndOthersContinue) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Tick(1);
  ASSERT_TRUE(state_->SetLost(3, true));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_lost", {{"gpu", "3"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_lost", {{"gpu", "2"}}, t2), 0.0);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "3"}}, t2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "2"}}, t2));
  const auto h = collector_->Health();
  EXPECT_TRUE(h.up);
  EXPECT_THAT(h.degraded, HasSubstr("GPU 3"));
  bool event = false;
  for (const Event& e : sink_.events()) {
    if (e.kind == EventKind::kGpuEvent && e.name == "gpu_lost") {
      event = true;
      EXPECT_EQ(e.identity.gpu_index, 3);
      EXPECT_FALSE(e.identity.gpu_uuid.empty());
      EXPECT_EQ(e.time, t2);
    }
  }
  EXPECT_TRUE(event);

  ASSERT_TRUE(state_->SetLost(3, false));
  const TimeNs t3 = Tick(3);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_lost", {{"gpu", "3"}}, t3), 0.0);
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "3"}}, t3));
  EXPECT_THAT(collector_->Health().degraded, ::testing::Not(HasSubstr("GPU_IS_LOST")));
}

TEST_F(GpuFakeTest, HungGpuIsSkippedOthersKeepReportingAndItRecovers) {
  GpuOptions o;
  o.gpu_deadline = 1 * kNsPerSec;  // each tick with a hung GPU waits this long once
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Tick(1);
  ASSERT_TRUE(state_->SetHang(2, true));  // the fake blocks GPU 2's calls (up to 120 s)
  const TimeNs t2 = Tick(2);
  EXPECT_TRUE(collector_->gpu_stalled(2));
  EXPECT_FALSE(collector_->gpu_stalled(1));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_nvml_stalled", {{"gpu", "2"}}, t2), 1.0);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "2"}}, t2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "1"}}, t2));
  EXPECT_THAT(collector_->Health().degraded, HasSubstr("GPU 2"));
  // Still hung: the next tick does not wait on GPU 2 again, the others are collected.
  const TimeNs t3 = Tick(3);
  EXPECT_TRUE(collector_->gpu_stalled(2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "7"}}, t3));

  ASSERT_TRUE(state_->SetHang(2, false));
  // The outstanding call returns; within a few ticks GPU 2 is read again.
  TimeNs t = t3;
  for (int n = 4; n < 40 && collector_->gpu_stalled(2); n++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t = Tick(n);
  }
  EXPECT_FALSE(collector_->gpu_stalled(2));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_nvml_stalled", {{"gpu", "2"}}, t), 0.0);
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_power_watts", {{"gpu", "2"}}, t));
  EXPECT_THAT(collector_->Health().degraded, ::testing::Not(HasSubstr("GPU 2")));
}

TEST_F(GpuFakeTest, ProcessesComeAndGo) {
  ASSERT_TRUE(state_->AddProcess(0, 4242, 2ull << 30));
  ASSERT_TRUE(state_->AddProcess(0, 4343, 1ull << 30));
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "0"}}, t1), 2.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "0"}, {"pid", "4242"}}, t1),
            static_cast<double>(2ull << 30));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "1"}}, t1), 0.0);
  // The process exits between ticks: its series gets no more samples, the count follows.
  ASSERT_TRUE(state_->RemoveProcess(0, 4242));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "0"}}, t2), 1.0);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "0"}, {"pid", "4242"}}, t2));
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "0"}, {"pid", "4343"}}, t2));
}

TEST_F(GpuFakeTest, ProcessListChangingDuringTheCallIsHandled) {
  // Many processes appear while the collector runs: the list is re-sized and re-read.
  ASSERT_NO_FATAL_FAILURE(Start());
  Tick(1);
  for (uint32_t pid = 1000; pid < 1040; pid++) ASSERT_TRUE(state_->AddProcess(4, pid, 1ull << 20));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "4"}}, t2), 40.0);
  for (uint32_t pid = 1000; pid < 1040; pid += 2) ASSERT_TRUE(state_->RemoveProcess(4, pid));
  const TimeNs t3 = Tick(3);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "4"}}, t3), 20.0);
  EXPECT_TRUE(collector_->Health().up);
}

TEST_F(GpuFakeTest, ProcessesExitingWhileTheListIsReadGiveAConsistentTick) {
  // Slow calls widen the window between the sizing call and the fetch; a writer adds and
  // removes processes meanwhile. Whatever NVML answers, a tick's count equals the pids listed.
  ASSERT_TRUE(state_->SetSlowCall(4, 2000));
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (uint32_t round = 0; !stop.load(); round++) {
      for (uint32_t pid = 2000; pid < 2030; pid++) (void)state_->AddProcess(4, pid + (round % 2) * 100, 1ull << 20);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (uint32_t pid = 2000; pid < 2030; pid++) (void)state_->RemoveProcess(4, pid + (round % 2) * 100);
    }
  });
  std::vector<TimeNs> ticks;
  for (int n = 1; n <= 8; n++) ticks.push_back(Tick(n));
  stop = true;
  churn.join();
  for (TimeNs t : ticks) {
    auto count = sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "4"}}, t);
    ASSERT_TRUE(count);
    size_t listed = 0;
    for (const auto& s : sink_.series()) {
      if (s.desc.name != "ithbat_gpu_process_memory_used_bytes" || s.labels.Get("gpu") != "4") continue;
      for (const auto& [st, v] : s.samples) listed += st == t;
    }
    EXPECT_EQ(*count, static_cast<double>(listed));
    EXPECT_LE(*count, 30.0);
  }
  EXPECT_TRUE(collector_->Health().up);
}

TEST_F(GpuFakeTest, NvLinkPerLinkErrorsAppearOnlyOnceNonZero) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Tick(1);
  EXPECT_EQ(sink_.CountWithSamples("ithbat_gpu_nvlink_link_errors_total"), 0u);
  EXPECT_TRUE(sink_.ValueAt("ithbat_gpu_nvlink_up", {{"gpu", "1"}, {"link", "4"}}, kT0 + kNsPerSec));
  ASSERT_TRUE(state_->AddNvLinkErrors(1, 4, 0 /* DL_REPLAY */, 3));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_nvlink_link_errors_total", {{"gpu", "1"}, {"link", "4"}, {"counter", "replay"}},
                          t2),
            3.0);
  EXPECT_EQ(sink_.CountWithSamples("ithbat_gpu_nvlink_link_errors_total"), 1u);
}

TEST_F(GpuFakeTest, HardwareCountersAndStatesFollowTheDevice) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_ecc_errors_total",
                          {{"gpu", "6"}, {"type", "uncorrected"}, {"counter", "aggregate"}}, t1),
            0.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_clock_event_active", {{"gpu", "6"}, {"reason", "hw_power_brake_slowdown"}}, t1),
            0.0);
  ASSERT_TRUE(state_->AddEccErrors(6, 1 /* uncorrected */, 2 /* DRAM */, 2));
  ASSERT_TRUE(state_->SetRemappedRows(6, 0, 1, true, false));
  ASSERT_TRUE(state_->SetPcieLink(6, 3, 8));  // downtrained from gen 5 x16
  ASSERT_TRUE(state_->SetForcedClockEventReasons(6, 0x80));  // HW power brake
  ASSERT_TRUE(state_->SetMigMode(7, true));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_ecc_errors_total",
                          {{"gpu", "6"}, {"type", "uncorrected"}, {"counter", "aggregate"}}, t2),
            2.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_ecc_location_errors_total",
                          {{"gpu", "6"}, {"type", "uncorrected"}, {"location", "device_memory"}}, t2),
            2.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_remapped_rows", {{"gpu", "6"}, {"kind", "uncorrected"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_row_remap_pending", {{"gpu", "6"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_pcie_link_generation", {{"gpu", "6"}}, t2), 3.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_pcie_link_generation_max", {{"gpu", "6"}}, t2), 5.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_pcie_link_width", {{"gpu", "6"}}, t2), 8.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_pcie_link_width_max", {{"gpu", "6"}}, t2), 16.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_clock_event_active", {{"gpu", "6"}, {"reason", "hw_power_brake_slowdown"}}, t2),
            1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_enabled", {{"gpu", "7"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_enabled", {{"gpu", "6"}}, t2), 0.0);
}

// MIG on GPU 0 with three instances (two GPU instances, the second split into two compute
// instances): each is a GPU of its own with parent_gpu and its MIG UUID; utilisation (NOT_SUPPORTED
// on MIG devices) is absent; MIG off again: the instance series stop, the count is 0.
TEST_F(GpuFakeTest, MigInstancesAreExportedAsGpusOfTheirOwn) {
  ASSERT_TRUE(state_->SetMigMode(0, true));
  ASSERT_TRUE(state_->Modify(0, [](sim::GpuConfig& c) {
    c.mig_instance_count = 3;
    c.mig[0] = sim::MigInstance{1, 0, 3, 0};
    c.mig[1] = sim::MigInstance{2, 0, 2, 0};
    c.mig[2] = sim::MigInstance{2, 1, 2, 0};
    c.process_count = 2;
    c.processes[0] = sim::ProcessEntry{5001, 1, 0, 0, 3ull << 30};
    c.processes[1] = sim::ProcessEntry{5002, 2, 1, 0, 1ull << 30};
  }));
  const uint64_t total = state_->Config(0)->memory_total_bytes;
  ASSERT_NO_FATAL_FAILURE(Start());
  Tick(1);
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_instances", {{"gpu", "0"}}, t2), 3.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_instances", {{"gpu", "1"}}, t2), 0.0);

  std::set<std::string> uuids;
  for (const std::string gpu : {"0/1/0", "0/2/0", "0/2/1"}) {
    auto info = sink_.FindWith("ithbat_gpu_info", {{"gpu", gpu}});
    ASSERT_TRUE(info) << gpu;
    EXPECT_EQ(info->labels.Get("parent_gpu"), std::optional<std::string_view>("0")) << gpu;
    const std::string uuid(info->labels.Get("gpu_uuid").value_or(""));
    EXPECT_TRUE(uuid.starts_with("MIG-")) << uuid;
    uuids.insert(uuid);
    for (const char* name : {"ithbat_gpu_memory_total_bytes", "ithbat_gpu_memory_free_bytes",
                             "ithbat_gpu_memory_used_bytes", "ithbat_gpu_compute_processes"}) {
      auto s = sink_.FindWith(name, {{"gpu", gpu}});
      ASSERT_TRUE(s) << name << " " << gpu;
      EXPECT_EQ(s->labels.Get("gpu_uuid"), std::optional<std::string_view>(uuid));
      EXPECT_EQ(s->labels.Get("parent_gpu"), std::optional<std::string_view>("0"));
      EXPECT_TRUE(sink_.ValueAt(name, {{"gpu", gpu}}, t2)) << name << " " << gpu;
    }
    EXPECT_FALSE(sink_.FindWith("ithbat_gpu_utilization_ratio", {{"gpu", gpu}})) << gpu;
  }
  EXPECT_EQ(uuids.size(), 3u);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_memory_total_bytes", {{"gpu", "0/1/0"}}, t2),
            static_cast<double>(total / 7 * 3));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_memory_used_bytes", {{"gpu", "0/1/0"}}, t2),
            static_cast<double>(3ull << 30));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "0/1/0"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "0/2/0"}}, t2), 0.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_compute_processes", {{"gpu", "0/2/1"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "0/2/1"}, {"pid", "5002"}}, t2),
            static_cast<double>(1ull << 30));
  // The parent keeps its own series (gpu="0", no parent_gpu).
  auto parent = sink_.FindWith("ithbat_gpu_memory_total_bytes", {{"gpu", "0"}});
  ASSERT_TRUE(parent);
  EXPECT_FALSE(parent->labels.Get("parent_gpu"));

  ASSERT_TRUE(state_->SetMigMode(0, false));
  const TimeNs t3 = Tick(3);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_instances", {{"gpu", "0"}}, t3), 0.0);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_memory_total_bytes", {{"gpu", "0/1/0"}}, t3));
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_info", {{"gpu", "0/2/1"}}, t3));
}

TEST_F(GpuFakeTest, MigOffExportsNoInstances) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_mig_instances", {{"gpu", "0"}}, t1), 0.0);
  for (const auto& s : sink_.series()) {
    EXPECT_FALSE(s.labels.Get("parent_gpu")) << s.desc.name << s.labels.ToString();
  }
}

TEST_F(GpuFakeTest, XidArrivesAsAnEvent) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Tick(1);  // identifies the GPUs; the event thread then registers them
  for (int i = 0; i < 500 && !collector_->events_ready(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(collector_->events_ready());
  ASSERT_TRUE(state_->InjectXid(5, 79));
  std::optional<Event> xid;
  for (int i = 0; i < 500 && !xid; i++) {
    for (const Event& e : sink_.events()) {
      if (e.kind == EventKind::kXid) xid = e;
    }
    if (!xid) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(xid) << "no Xid event within 5 s";
  EXPECT_EQ(xid->value, 79.0);
  EXPECT_EQ(xid->identity.gpu_index, 5);
  EXPECT_FALSE(xid->identity.gpu_uuid.empty());
  EXPECT_EQ(xid->source, "nvml");
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_xid_errors_total", {{"gpu", "5"}}, t2), 1.0);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_xid_errors_total", {{"gpu", "4"}}, t2), 0.0);
}

TEST_F(GpuFakeTest, UnderTheRuntimeAHungGpuNeverTripsTheWatchdog) {
  // The per-GPU deadline (300 ms) is below the runtime's collect deadline (3 s): a GPU whose
  // calls hang leaves the collector up and degraded instead of timed out.
  agent::RuntimeOptions ro;
  ro.interval = 100 * kNsPerMs;
  ro.collect_deadline = 3 * kNsPerSec;
  agent::Runtime runtime(sink_, ro);
  GpuOptions o;
  o.library = ITHBAT_FAKE_NVML_PATH;
  o.gpu_deadline = 300 * kNsPerMs;
  o.event_wait = 50 * kNsPerMs;
  ASSERT_TRUE(runtime.Add(GpuCollector::Create(o)));
  ASSERT_TRUE(state_->SetHang(6, true));
  ASSERT_TRUE(runtime.Start());
  auto gpu_status = [&] {
    for (const auto& st : runtime.Status()) {
      if (st.name == "gpu") return st;
    }
    return agent::CollectorStatus{};
  };
  // Wait (bounded) for a few collects with GPU 6 stalled.
  for (int i = 0; i < 200 && gpu_status().health.collects < 4; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto h = gpu_status().health;
  EXPECT_GE(h.collects, 4u);
  EXPECT_EQ(h.timeouts, 0u);
  EXPECT_TRUE(h.up);
  EXPECT_THAT(h.degraded, HasSubstr("GPU 6"));
  size_t gpu7_samples = 0, gpu6_samples = 0;
  for (const auto& s : sink_.series()) {
    if (s.desc.name != "ithbat_gpu_power_watts") continue;
    if (s.labels.Get("gpu") == "7") gpu7_samples = s.samples.size();
    if (s.labels.Get("gpu") == "6") gpu6_samples = s.samples.size();
  }
  EXPECT_GE(gpu7_samples, 3u);
  EXPECT_EQ(gpu6_samples, 0u);
  ASSERT_TRUE(state_->SetHang(6, false));
  for (int i = 0; i < 200 && !gpu_status().health.degraded.empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(gpu_status().health.degraded, "");
  runtime.Stop();
}

// Keep this test last in the file: the reader it abandons keeps the fake library loaded until
// its call returns, and tests run in one process (outside ctest) would share that instance.
TEST_F(GpuFakeTest, StopReturnsWhileAGpuIsStillHung) {
  GpuOptions o;
  o.gpu_deadline = 200 * kNsPerMs;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Tick(1);
  ASSERT_TRUE(state_->SetHang(1, true));
  Tick(2);
  EXPECT_TRUE(collector_->gpu_stalled(1));
  collector_->Stop();  // abandons GPU 1's reader (detached; it owns what it touches)
  EXPECT_EQ(collector_->Health().state, agent::CollectorState::kStopped);
  collector_.reset();
  ASSERT_TRUE(state_->SetHang(1, false));  // lets the abandoned call return and unload NVML
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// A real child process with exactly `env`, returned once it has exec'd (the CLOEXEC pipe
// closes), so /proc/<pid>/environ is sleep's. Killed and reaped by the destructor.
struct ChildProcess {
  pid_t pid = -1;
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid = fork();
    if (pid == 0) {
      execve(a[0], a.data(), e.data());
      _exit(127);
    }
    close(p[1]);
    char c;
    while (read(p[0], &c, 1) < 0 && errno == EINTR) {
    }
    close(p[0]);
  }
  ~ChildProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

TEST_F(GpuFakeTest, ProcessSeriesCarryTheRealProcessIdentityButNoSecret) {
  const std::string secret = "hunter2-do-not-leak-4711";
  ChildProcess child({"/bin/sleep", "30"},
                     {"SLURM_JOB_ID=777", "SLURM_PROCID=3", "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=16",
                      "CUDA_VISIBLE_DEVICES=5", "AWS_SECRET_ACCESS_KEY=" + secret});
  ASSERT_GT(child.pid, 0);
  ASSERT_TRUE(state_->AddProcess(1, static_cast<uint32_t>(child.pid), 3ull << 30));
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  const std::string pid = std::to_string(child.pid);
  auto s = sink_.FindWith("ithbat_gpu_process_memory_used_bytes", {{"pid", pid}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->labels.Get("job_id"), "777");
  EXPECT_EQ(s->labels.Get("rank"), "3");
  EXPECT_EQ(s->labels.Get("local_rank"), "1");
  EXPECT_EQ(s->labels.Get("world_size"), "16");
  EXPECT_EQ(s->labels.Get("pid"), pid);
  // NVML's GPU wins over CUDA_VISIBLE_DEVICES, and the collector's gpu/gpu_uuid are kept.
  EXPECT_EQ(s->labels.Get("gpu"), "1");
  EXPECT_TRUE(s->labels.Get("gpu_uuid"));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "1"}, {"pid", pid}}, t1),
            static_cast<double>(3ull << 30));
  const TimeNs t2 = Tick(2);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "1"}, {"pid", pid}, {"job_id", "777"}}, t2),
            static_cast<double>(3ull << 30));
  for (const auto& series : sink_.series()) {
    EXPECT_THAT(series.labels.ToString(), ::testing::Not(HasSubstr(secret))) << series.desc.name;
    EXPECT_THAT(series.labels.ToString(), ::testing::Not(HasSubstr("AWS_SECRET"))) << series.desc.name;
  }
  EXPECT_EQ(collector_->Health().errors, 0u) << collector_->Health().last_error;
  // The process leaves NVML's list and comes back: a fresh series registration, same identity.
  ASSERT_TRUE(state_->RemoveProcess(1, static_cast<uint32_t>(child.pid)));
  const TimeNs t3 = Tick(3);
  EXPECT_FALSE(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "1"}, {"pid", pid}}, t3));
  ASSERT_TRUE(state_->AddProcess(1, static_cast<uint32_t>(child.pid), 1ull << 30));
  const TimeNs t4 = Tick(4);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes",
                          {{"gpu", "1"}, {"pid", pid}, {"job_id", "777"}, {"rank", "3"}}, t4),
            static_cast<double>(1ull << 30));
}

TEST_F(GpuFakeTest, GpuProcessesArePublishedWithTheirIdentityForPerProcessCollectors) {
  ChildProcess child({"/bin/sleep", "30"}, {"SLURM_JOB_ID=778", "RANK=5", "LOCAL_RANK=2", "WORLD_SIZE=8"});
  ASSERT_GT(child.pid, 0);
  uint32_t missing = 4'000'000;
  while (std::filesystem::exists(std::filesystem::path("/proc") / std::to_string(missing))) missing--;
  agent::TrackedProcesses tracked;
  GpuOptions o;
  o.tracked = &tracked;
  ASSERT_TRUE(state_->AddProcess(2, static_cast<uint32_t>(child.pid), 1ull << 30));
  ASSERT_TRUE(state_->AddProcess(3, missing, 1ull << 30));
  ASSERT_NO_FATAL_FAILURE(Start(o));
  Tick(1);
  auto list = tracked.Snapshot();
  ASSERT_EQ(list.size(), 2u);
  const auto& resolved = list[0].pid == child.pid ? list[0] : list[1];
  const auto& unresolved = list[0].pid == child.pid ? list[1] : list[0];
  EXPECT_EQ(resolved.source, "gpu");
  EXPECT_EQ(resolved.identity.job, "778");
  EXPECT_EQ(resolved.identity.rank, 5);
  EXPECT_EQ(resolved.identity.pid, child.pid);
  EXPECT_EQ(resolved.identity.gpu_index, 2);
  // A process whose identity cannot be read is still tracked, with NVML's pid and GPU.
  EXPECT_EQ(unresolved.pid, static_cast<int32_t>(missing));
  EXPECT_EQ(unresolved.identity.gpu_index, 3);
  EXPECT_EQ(unresolved.identity.job, "");
  const uint64_t generation = tracked.generation();
  Tick(2);
  EXPECT_EQ(tracked.generation(), generation) << "an unchanged process list publishes nothing";
  ASSERT_TRUE(state_->RemoveProcess(2, static_cast<uint32_t>(child.pid)));
  Tick(3);
  list = tracked.Snapshot();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].pid, static_cast<int32_t>(missing));
  EXPECT_GT(tracked.generation(), generation);
}

TEST_F(GpuFakeTest, ProcessMissingFromProcKeepsPidAndGpuLabelsOnly) {
  // A pid with no /proc entry (NVML can list a pid of another pid namespace, or one that
  // just exited).
  uint32_t missing = 4'000'000;
  while (std::filesystem::exists(std::filesystem::path("/proc") / std::to_string(missing))) missing--;
  ASSERT_TRUE(state_->AddProcess(1, missing, 1ull << 30));
  ASSERT_NO_FATAL_FAILURE(Start());
  const TimeNs t1 = Tick(1);
  const std::string pid = std::to_string(missing);
  const uint64_t errors_after_first = collector_->Health().errors;
  EXPECT_EQ(errors_after_first, 1u);
  EXPECT_THAT(collector_->Health().last_error, HasSubstr(pid));
  Tick(2);
  const TimeNs t3 = Tick(3);
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "1"}, {"pid", pid}}, t1),
            static_cast<double>(1ull << 30));
  EXPECT_EQ(sink_.ValueAt("ithbat_gpu_process_memory_used_bytes", {{"gpu", "1"}, {"pid", pid}}, t3),
            static_cast<double>(1ull << 30));
  auto s = sink_.FindWith("ithbat_gpu_process_memory_used_bytes", {{"pid", pid}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->labels.size(), 3u) << s->labels.ToString();  // gpu, gpu_uuid, pid
  EXPECT_FALSE(s->labels.Get("job_id"));
  EXPECT_FALSE(s->labels.Get("rank"));
  EXPECT_EQ(sink_.CountSeries("ithbat_gpu_process_memory_used_bytes"), 1u);
  // Reported once for the pid, not every tick.
  EXPECT_EQ(collector_->Health().errors, errors_after_first);
}

}  // namespace
}  // namespace ithbat::collect

#endif  // ITHBAT_FAKE_NVML_PATH
