// The Store with a data directory: what it held before a restart (orderly, or kill -9) is
// what it holds after, up to the last completed Flush.
#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "testutil/testutil.h"

namespace ithbat::store {
namespace {

using ithbat::testing::TempDir;

MetricDesc PowerDesc() {
  return MetricDesc{"ithbat_test_power_watts", "Board power", "watts", MetricType::kGauge, {"gpu"}};
}
MetricDesc EnergyDesc() {
  return MetricDesc{
      "ithbat_test_energy_joules_total", "Energy used", "joules", MetricType::kCounter, {"gpu"}};
}

StoreOptions Options(const TempDir& dir) {
  StoreOptions o;
  o.data_dir = dir.path().string();
  o.retention = 24 * 3600 * kNsPerSec;
  return o;
}

std::unique_ptr<Store> OpenStore(const StoreOptions& o) {
  auto s = Store::Open(o);
  EXPECT_TRUE(s) << s.error().ToString();
  return s ? std::move(*s) : nullptr;
}

SeriesSelector Sel(std::string_view text) { return *SeriesSelector::Parse(text); }

std::map<std::string, std::vector<Sample>> SelectAll(const Store& store, std::string_view selector) {
  auto data = store.Select(Sel(selector), kMinTime, kMaxTime);
  EXPECT_TRUE(data) << data.error().ToString();
  std::map<std::string, std::vector<Sample>> out;
  for (auto& d : *data) out[d.info.desc->name + d.info.labels.ToString()] = d.samples;
  return out;
}

bool SameSamples(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].t != b[i].t || std::bit_cast<uint64_t>(a[i].v) != std::bit_cast<uint64_t>(b[i].v)) return false;
  }
  return true;
}

Event StepEvent(TimeNs t, int64_t step, int32_t rank) {
  Event e;
  e.time = t;
  e.kind = EventKind::kStep;
  e.identity.job = "job-1";
  e.identity.rank = rank;
  e.identity.gpu_index = rank;
  e.source = "joblog";
  e.step = step;
  e.value = 1.25;
  e.text = "step " + std::to_string(step);
  e.attrs = {{"loss", "2.5"}};
  return e;
}

TEST(RestartTest, HistorySurvivesAnOrderlyRestart) {
  TempDir dir;
  StoreOptions opts = Options(dir);
  const TimeNs base = NowNs() - 3600 * kNsPerSec;
  std::map<std::string, std::vector<Sample>> before;
  std::vector<Event> events_before;
  SeriesRef power0, power1, energy0;
  {
    auto store = OpenStore(opts);
    ASSERT_TRUE(store);
    power0 = *store->RegisterSeries(PowerDesc(), *LabelSet::From({{"gpu", "0"}}));
    power1 = *store->RegisterSeries(PowerDesc(), *LabelSet::From({{"gpu", "1"}}));
    energy0 = *store->RegisterSeries(EnergyDesc(), *LabelSet::From({{"gpu", "0"}}));
    double energy = 1e9;
    std::mt19937_64 rng(3);
    for (int i = 0; i < 2000; ++i) {
      TimeNs t = base + i * kNsPerSec;
      ASSERT_TRUE(store->Append(power0, t, 300.0 + (i % 7) * 0.5));
      // Special values where the chunk and disk codecs must agree bit for bit.
      double odd = i == 5   ? std::nan("")
                   : i == 6 ? -0.0
                   : i == 7 ? INFINITY
                            : std::bit_cast<double>(rng() >> 2);
      ASSERT_TRUE(store->Append(power1, t, odd));
      energy += 680.5 + (i % 13);
      ASSERT_TRUE(store->Append(energy0, t, energy));
      if (i % 100 == 0) {
        ASSERT_TRUE(store->AppendEvent(StepEvent(t, i / 100, 0)));
        ASSERT_TRUE(store->RecordStep("job-1", 0, {i / 100, t, t + 100 * kNsPerSec}));
      }
      if (i % 500 == 499) {
        ASSERT_TRUE(store->Flush());
      }
    }
    before = SelectAll(*store, "{__name__=~\"ithbat_test_.*\"}");
    events_before = store->Events(EventQuery{});
    ASSERT_EQ(before.size(), 3u);
    ASSERT_EQ(events_before.size(), 20u);
    EXPECT_GT(store->Stats().bytes_on_disk, 0u);
  }

  auto store = OpenStore(opts);
  ASSERT_TRUE(store);
  auto after = SelectAll(*store, "{__name__=~\"ithbat_test_.*\"}");
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [key, samples] : before) {
    ASSERT_TRUE(after.count(key)) << key;
    EXPECT_TRUE(SameSamples(samples, after[key])) << key;
    EXPECT_EQ(after[key].size(), 2000u) << key;
  }
  // Refs are stable: registering the same series again finds the one from disk.
  EXPECT_EQ(*store->RegisterSeries(PowerDesc(), *LabelSet::From({{"gpu", "0"}})), power0);
  EXPECT_EQ(*store->RegisterSeries(PowerDesc(), *LabelSet::From({{"gpu", "1"}})), power1);
  EXPECT_EQ(*store->RegisterSeries(EnergyDesc(), *LabelSet::From({{"gpu", "0"}})), energy0);
  EXPECT_EQ(store->Latest(power0)->t, base + 1999 * kNsPerSec);
  EXPECT_EQ(store->Stats().series, 3u);

  auto events_after = store->Events(EventQuery{});
  ASSERT_EQ(events_after.size(), events_before.size());
  for (size_t i = 0; i < events_after.size(); ++i) EXPECT_EQ(events_after[i], events_before[i]) << i;
  EXPECT_EQ(store->StepAt("job-1", 0, base + 150 * kNsPerSec), 1);
  EXPECT_EQ(store->StepAt("job-1", 0, base + 1999 * kNsPerSec), 19);
  EXPECT_EQ(store->FindStep("job-1", 0, 7), (StepSpan{7, base + 700 * kNsPerSec, base + 800 * kNsPerSec}));
  EXPECT_EQ(store->Steps("job-1", 0, kMinTime, kMaxTime).size(), 20u);

  // History keeps growing across restarts; the second run's data follows the first's.
  ASSERT_TRUE(store->Append(power0, base + 2000 * kNsPerSec, 301.0));
  ASSERT_TRUE(store->AppendEvent(StepEvent(base + 2000 * kNsPerSec, 20, 0)));
  store.reset();  // destruction flushes
  store = OpenStore(opts);
  ASSERT_TRUE(store);
  auto again = SelectAll(*store, "ithbat_test_power_watts{gpu=\"0\"}");
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again.begin()->second.size(), 2001u);
  EXPECT_EQ(again.begin()->second.back().v, 301.0);
  EXPECT_EQ(store->Events(EventQuery{}).size(), 21u);
}

// ---- kill -9 -------------------------------------------------------------------------------

constexpr int kSeries = 4;
constexpr TimeNs kTick = 10 * kNsPerMs;
constexpr int kTicksPerFlush = 5;

double ValueAt(int series, int64_t tick) { return series * 1000.0 + static_cast<double>(tick) * 0.5; }

// Appends tick after tick (samples of every series, an event and a step each), flushing every
// few ticks and reporting each completed flush's last tick on `report_fd`.
[[noreturn]] void StoreChild(const StoreOptions& opts, TimeNs base, int report_fd) {
  auto opened = Store::Open(opts);
  if (!opened) _exit(2);
  Store& store = **opened;
  SeriesRef refs[kSeries];
  for (int s = 0; s < kSeries; ++s) {
    auto ref = store.RegisterSeries(PowerDesc(), *LabelSet::From({{"gpu", std::to_string(s)}}));
    if (!ref) _exit(3);
    refs[s] = *ref;
  }
  int64_t tick = 0;
  if (auto last = store.Latest(refs[0])) tick = (last->t - base) / kTick + 1;
  for (;; ++tick) {
    TimeNs t = base + tick * kTick;
    for (int s = 0; s < kSeries; ++s) {
      if (!store.Append(refs[s], t, ValueAt(s, tick))) _exit(4);
    }
    (void)store.AppendEvent(StepEvent(t, tick, 0));
    if (!store.RecordStep("job-1", 0, {tick, t, t + kTick})) _exit(5);
    if (tick % kTicksPerFlush == kTicksPerFlush - 1) {
      if (!store.Flush()) _exit(6);
      if (write(report_fd, &tick, sizeof(tick)) != sizeof(tick)) _exit(7);
    }
    usleep(200);
  }
}

TEST(RestartTest, KillNineLosesAtMostWhatFollowedTheLastFlush) {
  TempDir dir;
  StoreOptions opts = Options(dir);
  const TimeNs base = NowNs() - 3600 * kNsPerSec;
  std::mt19937 rng(99);
  int64_t last_flushed = -1;
  for (int round = 0; round < 6; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      StoreChild(opts, base, fds[1]);
    }
    close(fds[1]);
    usleep(30'000 + rng() % 120'000);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
    int64_t reported;
    while (read(fds[0], &reported, sizeof(reported)) == sizeof(reported))
      last_flushed = std::max(last_flushed, reported);
    close(fds[0]);
  }
  ASSERT_GE(last_flushed, 0) << "no flush completed";

  auto store = OpenStore(opts);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->Stats().series, static_cast<size_t>(kSeries));
  // Every series holds ticks 0..n-1 without a gap, n covering the last reported flush.
  int64_t n = -1;
  auto all = SelectAll(*store, "ithbat_test_power_watts");
  ASSERT_EQ(all.size(), static_cast<size_t>(kSeries));
  for (int s = 0; s < kSeries; ++s) {
    const auto& samples = all["ithbat_test_power_watts{gpu=\"" + std::to_string(s) + "\"}"];
    if (n < 0) n = static_cast<int64_t>(samples.size());
    ASSERT_EQ(static_cast<int64_t>(samples.size()), n) << "series " << s;
    for (int64_t k = 0; k < n; ++k) {
      ASSERT_EQ(samples[k].t, base + k * kTick) << "series " << s << " tick " << k;
      ASSERT_EQ(samples[k].v, ValueAt(s, k)) << "series " << s << " tick " << k;
    }
  }
  EXPECT_GT(n, last_flushed);
  // Events and steps went into the same segments as the samples: the same prefix.
  auto events = store->Events(EventQuery{.limit = 1'000'000});
  ASSERT_EQ(static_cast<int64_t>(events.size()), n);
  for (int64_t k = 0; k < n; ++k) ASSERT_EQ(events[k].step, k);
  EXPECT_EQ(static_cast<int64_t>(store->Steps("job-1", 0, kMinTime, kMaxTime).size()), n);
  EXPECT_EQ(store->StepAt("job-1", 0, base + (n - 1) * kTick + 1), n - 1);
}

}  // namespace
}  // namespace ithbat::store
