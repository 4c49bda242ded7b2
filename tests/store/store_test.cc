#include "store/store.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace ithbat::store {
namespace {

constexpr TimeNs kT0 = 1'764'460'800 * kNsPerSec;

TimeNs Sec(int64_t s) { return kT0 + s * kNsPerSec; }

MetricDesc Gauge(std::string name, std::string unit = "") {
  MetricDesc d;
  d.name = std::move(name);
  d.help = "A test gauge";
  d.unit = std::move(unit);
  d.type = MetricType::kGauge;
  return d;
}

MetricDesc Counter(std::string name) {
  MetricDesc d;
  d.name = std::move(name);
  d.help = "A test counter";
  d.type = MetricType::kCounter;
  return d;
}

LabelSet Labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  auto l = LabelSet::From(pairs);
  EXPECT_TRUE(l) << l.error().ToString();
  return l ? *l : LabelSet();
}

std::unique_ptr<Store> OpenStore(StoreOptions o = {}) {
  auto s = Store::Open(std::move(o));
  EXPECT_TRUE(s) << s.error().ToString();
  return s ? std::move(*s) : nullptr;
}

SeriesSelector Sel(std::string_view text) {
  auto s = SeriesSelector::Parse(text);
  EXPECT_TRUE(s) << text << ": " << s.error().ToString();
  return s ? *s : SeriesSelector{};
}

std::vector<Sample> SelectOne(const Store& store, std::string_view sel, TimeNs from, TimeNs to) {
  auto r = store.Select(Sel(sel), from, to);
  EXPECT_TRUE(r);
  if (!r || r->empty()) return {};
  EXPECT_EQ(r->size(), 1u);
  return r->front().samples;
}

std::vector<std::string> LabelTexts(const std::vector<SeriesInfo>& infos) {
  std::vector<std::string> out;
  for (const auto& i : infos) out.push_back(i.desc->name + i.labels.ToString());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(StoreTest, RegisterIsIdempotentAndRefsAreDense) {
  auto store = OpenStore();
  auto a = store->RegisterSeries(Gauge("temp_celsius", "celsius"), Labels({{"gpu", "0"}}));
  auto b = store->RegisterSeries(Gauge("temp_celsius", "celsius"), Labels({{"gpu", "1"}}));
  auto c = store->RegisterSeries(Counter("errors_total"), Labels({{"gpu", "0"}}));
  auto a2 = store->RegisterSeries(Gauge("temp_celsius", "celsius"), Labels({{"gpu", "0"}}));
  ASSERT_TRUE(a && b && c && a2);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 1u);
  EXPECT_EQ(*c, 2u);
  EXPECT_EQ(*a2, *a);
  EXPECT_EQ(store->Stats().series, 3u);
  // Another label_names list is documentation only: same series.
  MetricDesc d = Gauge("temp_celsius", "celsius");
  d.label_names = {"gpu"};
  auto a3 = store->RegisterSeries(d, Labels({{"gpu", "0"}}));
  ASSERT_TRUE(a3);
  EXPECT_EQ(*a3, *a);
}

TEST(StoreTest, RegisterRejectsBadAndConflictingDescs) {
  auto store = OpenStore();
  auto bad = store->RegisterSeries(Gauge("bad name"), {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto bad_counter = store->RegisterSeries(Counter("no_suffix"), {});
  ASSERT_FALSE(bad_counter);
  EXPECT_EQ(bad_counter.error().code, ErrorCode::kInvalidArgument);

  ASSERT_TRUE(store->RegisterSeries(Gauge("power_watts", "watts"), Labels({{"gpu", "0"}})));
  MetricDesc other_help = Gauge("power_watts", "watts");
  other_help.help = "Something else";
  MetricDesc other_type = Gauge("power_watts", "watts");
  other_type.type = MetricType::kCounter;
  MetricDesc other_unit = Gauge("power_watts", "");
  for (const auto& d : {other_help, other_type, other_unit}) {
    auto r = store->RegisterSeries(d, Labels({{"gpu", "1"}}));
    ASSERT_FALSE(r) << d.help;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    // Also for a series that exists already.
    r = store->RegisterSeries(d, Labels({{"gpu", "0"}}));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(store->Stats().series, 1u);
}

TEST(StoreTest, SeriesLimit) {
  StoreOptions o;
  o.max_series = 3;
  auto store = OpenStore(o);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->RegisterSeries(Gauge("m"), Labels({{"i", std::to_string(i)}})));
  }
  auto r = store->RegisterSeries(Gauge("m"), Labels({{"i", "3"}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  // Existing series are still found.
  auto again = store->RegisterSeries(Gauge("m"), Labels({{"i", "1"}}));
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 1u);
}

TEST(StoreTest, OpenRejectsBadOptions) {
  StoreOptions o;
  o.samples_per_chunk = 0;
  EXPECT_FALSE(Store::Open(o));
  o = {};
  o.max_series = 0;
  EXPECT_FALSE(Store::Open(o));
  o = {};
  o.retention = -1;
  EXPECT_FALSE(Store::Open(o));
}

// ---------------------------------------------------------------------------------------------
// Append rules

TEST(StoreTest, OrderAndDuplicateRules) {
  auto store = OpenStore();
  auto ref = *store->RegisterSeries(Gauge("m"), {});
  EXPECT_TRUE(store->Append(ref, Sec(10), 1.0));
  EXPECT_TRUE(store->Append(ref, Sec(11), 2.0));

  auto older = store->Append(ref, Sec(5), 3.0);
  ASSERT_FALSE(older);
  EXPECT_EQ(older.error().code, ErrorCode::kOutOfOrder);

  auto dup = store->Append(ref, Sec(11), 2.5);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kDuplicate);

  EXPECT_TRUE(store->Append(ref, Sec(11), 2.0));  // same t, same value: ignored

  auto unknown = store->Append(ref + 100, Sec(12), 1.0);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  EXPECT_FALSE(store->Append(0xffffffffu, Sec(12), 1.0));

  // NaN resent at the same time is the same value (bits), not a duplicate.
  EXPECT_TRUE(store->Append(ref, Sec(12), std::nan("")));
  EXPECT_TRUE(store->Append(ref, Sec(12), std::nan("")));

  auto st = store->Stats();
  EXPECT_EQ(st.samples_appended, 3u);
  EXPECT_EQ(st.samples_rejected, 4u);
  EXPECT_EQ(st.samples_in_memory, 3u);
  EXPECT_GT(st.sample_bytes_in_memory, 0u);

  auto samples = SelectOne(*store, "m", kMinTime, kMaxTime);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].v, 1.0);
  EXPECT_EQ(samples[1].v, 2.0);
  EXPECT_TRUE(std::isnan(samples[2].v));
}

// ---------------------------------------------------------------------------------------------
// Select

TEST(StoreTest, SelectWindowsAcrossSealedAndOpenChunks) {
  StoreOptions o;
  o.samples_per_chunk = 8;
  auto store = OpenStore(o);
  auto ref = *store->RegisterSeries(Gauge("m"), {});
  for (int i = 0; i < 45; ++i) ASSERT_TRUE(store->Append(ref, Sec(i), i * 0.5));  // 5 sealed + 5 open

  auto check = [&](int64_t from, int64_t to) {
    auto samples = SelectOne(*store, "m", Sec(from), Sec(to));
    int64_t lo = std::max<int64_t>(from, 0), hi = std::min<int64_t>(to, 44);
    ASSERT_EQ(samples.size(), static_cast<size_t>(std::max<int64_t>(0, hi - lo + 1))) << from << ".." << to;
    for (size_t k = 0; k < samples.size(); ++k) {
      EXPECT_EQ(samples[k].t, Sec(lo + static_cast<int64_t>(k)));
      EXPECT_EQ(samples[k].v, static_cast<double>(lo + static_cast<int64_t>(k)) * 0.5);
    }
  };
  check(0, 44);
  check(-100, 100);
  check(7, 8);    // the boundary between two sealed chunks, inclusive on both ends
  check(38, 42);  // last sealed chunk into the open one
  check(40, 44);  // the open chunk alone
  check(44, 44);
  check(3, 3);
  check(12, 30);
  check(45, 50);  // after everything: no series
  auto none = store->Select(Sel("m"), Sec(50), Sec(60));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto reversed = store->Select(Sel("m"), Sec(10), Sec(5));
  ASSERT_TRUE(reversed);
  EXPECT_TRUE(reversed->empty());

  auto latest = store->Latest(ref);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->t, Sec(44));
  EXPECT_EQ(latest->v, 22.0);
  EXPECT_FALSE(store->Latest(ref + 1));
}

class MatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore();
    Add("gpu_temp_celsius", {{"gpu", "0"}, {"model", "H100"}});
    Add("gpu_temp_celsius", {{"gpu", "1"}, {"model", "H100"}});
    Add("gpu_temp_celsius", {{"gpu", "10"}, {"model", "A100"}});
    Add("gpu_temp_celsius", {{"gpu", "2"}});
    Add("gpu_power_watts", {{"gpu", "0"}});
    Add("host_load", {});
    Add("gpu_ecc_total", {{"gpu", "0"}, {"kind", "corrected"}});
  }
  void Add(const std::string& name, std::initializer_list<std::pair<std::string_view, std::string_view>> labels) {
    MetricDesc d = name.ends_with("_total") ? Counter(name) : Gauge(name);
    if (name.ends_with("_celsius")) d.unit = "celsius";
    if (name.ends_with("_watts")) d.unit = "watts";
    auto ref = store_->RegisterSeries(d, Labels(labels));
    ASSERT_TRUE(ref) << ref.error().ToString();
    ASSERT_TRUE(store_->Append(*ref, Sec(1), 1.0));
  }
  std::vector<std::string> List(std::string_view sel) { return LabelTexts(store_->ListSeries(Sel(sel))); }

  std::unique_ptr<Store> store_;
};

TEST_F(MatcherTest, EqualityAndOrder) {
  // Series sorted by their label text within a metric.
  EXPECT_EQ(List("gpu_temp_celsius"),
            (std::vector<std::string>{R"(gpu_temp_celsius{gpu="0",model="H100"})",
                                      R"(gpu_temp_celsius{gpu="1",model="H100"})",
                                      R"(gpu_temp_celsius{gpu="10",model="A100"})", R"(gpu_temp_celsius{gpu="2"})"}));
  EXPECT_EQ(List(R"(gpu_temp_celsius{gpu="1"})"),
            (std::vector<std::string>{R"(gpu_temp_celsius{gpu="1",model="H100"})"}));
  EXPECT_TRUE(List(R"(gpu_temp_celsius{gpu="7"})").empty());
  EXPECT_TRUE(List(R"(no_such_metric)").empty());
  EXPECT_TRUE(List(R"(gpu_temp_celsius{nolabel="x"})").empty());
  EXPECT_EQ(List("host_load"), (std::vector<std::string>{"host_load"}));
}

TEST_F(MatcherTest, MissingLabelIsEmpty) {
  // model="" matches series without a model label; model!="" those with one.
  EXPECT_EQ(List(R"(gpu_temp_celsius{model=""})"), (std::vector<std::string>{R"(gpu_temp_celsius{gpu="2"})"}));
  EXPECT_EQ(List(R"(gpu_temp_celsius{model!=""})").size(), 3u);
  EXPECT_EQ(List(R"(gpu_temp_celsius{model!="H100"})"),
            (std::vector<std::string>{R"(gpu_temp_celsius{gpu="10",model="A100"})", R"(gpu_temp_celsius{gpu="2"})"}));
  EXPECT_EQ(List(R"(gpu_temp_celsius{nolabel!="x"})").size(), 4u);
}

TEST_F(MatcherTest, Regex) {
  // Fully anchored: "1" does not match "10".
  EXPECT_EQ(List(R"(gpu_temp_celsius{gpu=~"1"})"),
            (std::vector<std::string>{R"(gpu_temp_celsius{gpu="1",model="H100"})"}));
  EXPECT_EQ(List(R"(gpu_temp_celsius{gpu=~"1.*"})").size(), 2u);
  EXPECT_EQ(List(R"(gpu_temp_celsius{gpu=~"0|2"})").size(), 2u);
  EXPECT_EQ(List(R"(gpu_temp_celsius{gpu!~"1.*"})").size(), 2u);
  EXPECT_EQ(List(R"(gpu_temp_celsius{model=~"H.*|"})").size(), 3u);  // "" matches the missing label
  EXPECT_EQ(List(R"(gpu_temp_celsius{model!~".+"})"), (std::vector<std::string>{R"(gpu_temp_celsius{gpu="2"})"}));
  EXPECT_EQ(List(R"(gpu_temp_celsius{model=~"H100",gpu!="0"})"),
            (std::vector<std::string>{R"(gpu_temp_celsius{gpu="1",model="H100"})"}));
}

TEST_F(MatcherTest, NameMatchersAcrossMetrics) {
  // Metrics in name order, then series in label order.
  EXPECT_EQ(List(R"({gpu="0"})"), (std::vector<std::string>{R"(gpu_ecc_total{gpu="0",kind="corrected"})",
                                                            R"(gpu_power_watts{gpu="0"})",
                                                            R"(gpu_temp_celsius{gpu="0",model="H100"})"}));
  EXPECT_EQ(List(R"({__name__=~"gpu_p.*|host_.*"})"),
            (std::vector<std::string>{R"(gpu_power_watts{gpu="0"})", "host_load"}));
  EXPECT_EQ(List(R"({__name__!~"gpu_.*"})"), (std::vector<std::string>{"host_load"}));
  EXPECT_EQ(List(R"({__name__="host_load"})"), (std::vector<std::string>{"host_load"}));
  EXPECT_EQ(List(R"({__name__=~".+"})").size(), 7u);

  auto r = store_->Select(Sel(R"({gpu=~"0|1"})"), kMinTime, kMaxTime);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ(r->at(0).info.desc->name, "gpu_ecc_total");
  EXPECT_EQ(r->at(3).info.labels.ToString(), R"({gpu="1",model="H100"})");
  EXPECT_EQ(r->at(3).samples.size(), 1u);
}

TEST_F(MatcherTest, HandBuiltSelectorWithABadRegex) {
  SeriesSelector sel;
  sel.metric = "gpu_temp_celsius";
  sel.matchers.push_back({"gpu", LabelMatcher::Op::kRe, "("});
  auto r = store_->Select(sel, kMinTime, kMaxTime);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListSeries(sel).empty());
}

TEST_F(MatcherTest, ForEachLatestAndMetrics) {
  auto temp = *store_->RegisterSeries(Gauge("gpu_temp_celsius", "celsius"), Labels({{"gpu", "2"}}));
  ASSERT_TRUE(store_->Append(temp, Sec(5), 71.0));
  std::vector<std::string> seen;
  store_->ForEachLatest(kMinTime, [&](const MetricDesc& d, const LabelSet& l, Sample s) {
    seen.push_back(fmt::format("{}{} {}", d.name, l.ToString(), s.v));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{
                      R"(gpu_ecc_total{gpu="0",kind="corrected"} 1)", R"(gpu_power_watts{gpu="0"} 1)",
                      R"(gpu_temp_celsius{gpu="0",model="H100"} 1)", R"(gpu_temp_celsius{gpu="1",model="H100"} 1)",
                      R"(gpu_temp_celsius{gpu="10",model="A100"} 1)", R"(gpu_temp_celsius{gpu="2"} 71)",
                      "host_load 1"}));
  seen.clear();
  store_->ForEachLatest(Sec(2), [&](const MetricDesc& d, const LabelSet& l, Sample s) {
    seen.push_back(fmt::format("{}{} {}", d.name, l.ToString(), s.v));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{R"(gpu_temp_celsius{gpu="2"} 71)"}));

  auto metrics = store_->Metrics();
  std::vector<std::string> names;
  for (const auto& m : metrics) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gpu_ecc_total", "gpu_power_watts", "gpu_temp_celsius", "host_load"}));
  EXPECT_EQ(metrics[2].unit, "celsius");
}

// ---------------------------------------------------------------------------------------------
// Retention

TEST(StoreTest, RetentionByTime) {
  StoreOptions o;
  o.samples_per_chunk = 10;
  o.retention = 30 * kNsPerSec;
  auto store = OpenStore(o);
  auto live = *store->RegisterSeries(Gauge("live"), {});
  auto dead = *store->RegisterSeries(Gauge("dead"), {});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store->Append(live, Sec(i), i));
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(store->Append(dead, Sec(i), i));  // 1 sealed + 5 open

  store->EnforceRetention(Sec(100));  // cutoff 70: chunks ending before 70 go
  auto samples = SelectOne(*store, "live", kMinTime, kMaxTime);
  ASSERT_FALSE(samples.empty());
  EXPECT_EQ(samples.front().t, Sec(70));  // the chunk [70, 79] ends after the cutoff
  EXPECT_EQ(samples.back().t, Sec(99));
  EXPECT_EQ(samples.size(), 30u);

  // The dead series lost its sealed and its open chunk.
  EXPECT_TRUE(SelectOne(*store, "dead", kMinTime, kMaxTime).empty());
  EXPECT_FALSE(store->Latest(dead));
  auto st = store->Stats();
  EXPECT_EQ(st.chunks_dropped, 7u + 2u);
  EXPECT_EQ(st.samples_in_memory, 30u);
  EXPECT_EQ(st.series, 2u);

  // The order rule outlives the drop; new samples start a fresh chunk.
  EXPECT_EQ(store->Append(dead, Sec(3), 1.0).error().code, ErrorCode::kOutOfOrder);
  EXPECT_TRUE(store->Append(dead, Sec(100), 5.0));
  ASSERT_TRUE(store->Latest(dead));
  EXPECT_EQ(store->Latest(dead)->v, 5.0);

  // No time retention: nothing goes by age.
  StoreOptions keep;
  keep.retention = 0;
  keep.samples_per_chunk = 10;
  auto forever = OpenStore(keep);
  auto r = *forever->RegisterSeries(Gauge("m"), {});
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(forever->Append(r, Sec(i), i));
  forever->EnforceRetention(Sec(1'000'000));
  EXPECT_EQ(forever->Stats().samples_in_memory, 50u);
}

TEST(StoreTest, RetentionByMemoryBudgetDropsTheGloballyOldest) {
  StoreOptions o;
  o.samples_per_chunk = 16;
  o.retention = 0;
  auto probe = OpenStore(o);
  std::vector<SeriesRef> refs;
  std::mt19937_64 rng(1);
  auto fill = [&](Store& store) {
    refs.clear();
    for (int s = 0; s < 4; ++s) refs.push_back(*store.RegisterSeries(Gauge("m"), Labels({{"s", std::to_string(s)}})));
    // Series s is shifted by s*1000 s: series 3 holds the newest data.
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 160; ++i) {
        ASSERT_TRUE(store.Append(refs[s], Sec(s * 1000 + i), static_cast<double>(rng() % 100000) / 7.0));
      }
    }
  };
  fill(*probe);
  uint64_t full = probe->Stats().sample_bytes_in_memory;

  o.memory_budget_bytes = full / 3;
  auto store = OpenStore(o);
  rng.seed(1);
  fill(*store);
  store->EnforceRetention(Sec(10'000));
  auto st = store->Stats();
  EXPECT_LE(st.sample_bytes_in_memory + 0, o.memory_budget_bytes);
  EXPECT_GT(st.chunks_dropped, 0u);
  // Oldest first: series 0 and 1 went entirely, series 3 (the newest) is whole.
  auto r = store->Select(Sel("m"), kMinTime, kMaxTime);
  ASSERT_TRUE(r);
  TimeNs oldest_kept = kMaxTime;
  for (const auto& sd : *r) oldest_kept = std::min(oldest_kept, sd.samples.front().t);
  EXPECT_GE(oldest_kept, Sec(2000));
  EXPECT_EQ(SelectOne(*store, R"(m{s="3"})", kMinTime, kMaxTime).size(), 160u);

  // A budget below the open chunks' size: every sealed chunk goes, the open ones stay.
  o.memory_budget_bytes = 1;
  auto tiny = OpenStore(o);
  rng.seed(1);
  fill(*tiny);
  tiny->EnforceRetention(Sec(10'000));
  EXPECT_EQ(tiny->Stats().samples_in_memory, 0u);  // 160 = 10 chunks of 16: all sealed
  EXPECT_EQ(tiny->Stats().chunks_dropped, 40u);
}

// Events count in the memory budget like samples, and the oldest data goes first whichever it
// is: a job printing floods of parsed lines cannot grow the agent past its budget.
TEST(StoreTest, MemoryBudgetEvictsEventsAndChunksOldestFirst) {
  StoreOptions o;
  o.samples_per_chunk = 16;
  o.retention = 0;
  o.memory_budget_bytes = 64 << 10;
  auto store = OpenStore(o);
  const SeriesRef ref = *store->RegisterSeries(Gauge("m"), Labels({{"s", "0"}}));
  // Samples over 0..1000 s, events over 500..1500 s (about 300 bytes each: 2,000 of them are
  // far over the budget).
  std::mt19937_64 rng(2);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(store->Append(ref, Sec(i), static_cast<double>(rng() % 100000) / 7.0));
  }
  for (int i = 0; i < 2000; ++i) {
    Event e;
    e.time = Sec(500) + i * kNsPerSec / 2;
    e.kind = EventKind::kLoss;
    e.value = 1.0;
    e.source = "joblog";
    ASSERT_TRUE(store->AppendEvent(std::move(e)));
  }
  // Between enforcements the event log's own bound (the whole budget) already held.
  EXPECT_LE(store->Stats().event_bytes_in_memory, o.memory_budget_bytes);
  store->EnforceRetention(Sec(2000));
  const StoreStats st = store->Stats();
  EXPECT_LE(st.sample_bytes_in_memory + st.event_bytes_in_memory, o.memory_budget_bytes);
  EXPECT_GT(st.events_dropped, 0u);
  EXPECT_GT(st.chunks_dropped, 0u) << "samples older than every event go before the events";
  // What is left is the newest: no sample older than the oldest event kept (bar the open chunk,
  // which always stays).
  const auto events = store->Events(EventQuery{});
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().time, Sec(500) + 1999 * kNsPerSec / 2);
  auto r = store->Select(Sel("m"), kMinTime, events.front().time - 1);
  ASSERT_TRUE(r);
  size_t older = 0;
  for (const auto& sd : *r) older += sd.samples.size();
  EXPECT_LE(older, o.samples_per_chunk) << "only the open chunk may hold samples older than the events kept";
}

// ---------------------------------------------------------------------------------------------
// Events and steps are the event log's and the timelines'; the store only forwards.

TEST(StoreTest, EventsAndSteps) {
  auto store = OpenStore();
  Event e;
  e.time = Sec(5);
  e.kind = EventKind::kXid;
  e.value = 79;
  e.source = "kmsg";
  ASSERT_TRUE(store->AppendEvent(e));
  EventQuery q;
  auto got = store->Events(q);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, EventKind::kXid);
  EXPECT_EQ(store->Stats().events, 1u);

  ASSERT_TRUE(store->RecordStep("job1", 0, StepSpan{1, Sec(10), Sec(12)}));
  ASSERT_TRUE(store->RecordStep("job1", 0, StepSpan{2, Sec(12), Sec(15)}));
  EXPECT_EQ(store->StepAt("job1", 0, Sec(13)), 2);
  ASSERT_TRUE(store->FindStep("job1", 0, 1));
  EXPECT_EQ(store->FindStep("job1", 0, 1)->end, Sec(12));
  EXPECT_EQ(store->Steps("job1", 0, kMinTime, kMaxTime).size(), 2u);
  EXPECT_FALSE(store->RecordStep("job1", 0, StepSpan{3, Sec(20), Sec(19)}));
  // Memory mode: Flush has nothing to do and succeeds.
  EXPECT_TRUE(store->Flush());
  EXPECT_EQ(store->Stats().flushes, 0u);
}

// ---------------------------------------------------------------------------------------------
// Concurrency: one writer per series, readers everywhere.

TEST(StoreTest, ConcurrentWritersAndReaders) {
  StoreOptions o;
  o.samples_per_chunk = 32;
  auto store = OpenStore(o);
  constexpr int kWriters = 4, kSeriesPerWriter = 4, kSamples = 10000;
  std::vector<std::vector<SeriesRef>> refs(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    for (int s = 0; s < kSeriesPerWriter; ++s) {
      auto r = store->RegisterSeries(Gauge("c"), Labels({{"w", std::to_string(w)}, {"s", std::to_string(s)}}));
      ASSERT_TRUE(r);
      refs[w].push_back(*r);
    }
  }
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kSamples; ++i) {
        for (SeriesRef r : refs[w]) {
          // value = index: a snapshot is consistent when values run 0, 1, 2, ... without gaps.
          if (!store->Append(r, Sec(i), static_cast<double>(i))) failures.fetch_add(1);
        }
      }
    });
  }
  // One more writer registering new series meanwhile.
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) {
      auto r = store->RegisterSeries(Gauge("late"), Labels({{"i", std::to_string(i)}}));
      if (!r || !store->Append(*r, Sec(i), 1.0)) failures.fetch_add(1);
    }
  });
  for (int reader = 0; reader < 2; ++reader) {
    threads.emplace_back([&] {
      std::vector<double> last_latest(kWriters * kSeriesPerWriter, -1);
      do {
        auto r = store->Select(Sel("c"), kMinTime, kMaxTime);
        if (!r) {
          failures.fetch_add(1);
          continue;
        }
        for (const auto& sd : *r) {
          for (size_t k = 0; k < sd.samples.size(); ++k) {
            if (sd.samples[k].v != static_cast<double>(k) || sd.samples[k].t != Sec(static_cast<int64_t>(k))) {
              failures.fetch_add(1);
              break;
            }
          }
        }
        for (int w = 0; w < kWriters; ++w) {
          for (int s = 0; s < kSeriesPerWriter; ++s) {
            auto l = store->Latest(refs[w][s]);
            double& prev = last_latest[w * kSeriesPerWriter + s];
            if (l) {
              if (l->v < prev) failures.fetch_add(1);
              prev = l->v;
            }
          }
        }
        store->ForEachLatest(kMinTime, [&](const MetricDesc&, const LabelSet&, Sample) {});
        (void)store->Stats();
      } while (!done.load());
    });
  }
  for (int i = 0; i < kWriters + 1; ++i) threads[i].join();
  done.store(true);
  for (size_t i = kWriters + 1; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(failures.load(), 0);
  auto st = store->Stats();
  EXPECT_EQ(st.samples_appended, static_cast<uint64_t>(kWriters * kSeriesPerWriter * kSamples + 200));
  EXPECT_EQ(st.series, static_cast<size_t>(kWriters * kSeriesPerWriter + 200));
  auto all = store->Select(Sel("c"), kMinTime, kMaxTime);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), static_cast<size_t>(kWriters * kSeriesPerWriter));
  for (const auto& sd : *all) EXPECT_EQ(sd.samples.size(), static_cast<size_t>(kSamples));
}

// ---------------------------------------------------------------------------------------------
// Size on realistic GPU data (the shapes of shared/bench/gen-gpu-node.py): a size bound, not a
// timing one. The codec does about 0.9 bytes/sample here; Prometheus' TSDB 2.08 on disk.

TEST(StoreTest, BytesPerSampleOnGpuLikeData) {
  auto store = OpenStore();
  std::mt19937_64 rng(42);
  std::normal_distribution<double> g(0, 1);
  struct Gen {
    SeriesRef ref;
    std::function<double(int)> next;
  };
  std::vector<Gen> gens;
  auto add = [&](const std::string& name, const std::string& gpu, const std::string& extra,
                 std::function<double(int)> fn) {
    auto labels = extra.empty() ? Labels({{"gpu", gpu}}) : Labels({{"gpu", gpu}, {"x", extra}});
    MetricDesc d = name.ends_with("_total") ? Counter(name) : Gauge(name);
    auto r = store->RegisterSeries(d, labels);
    ASSERT_TRUE(r) << r.error().ToString();
    gens.push_back({*r, std::move(fn)});
  };
  for (int gpu = 0; gpu < 8; ++gpu) {
    std::string id = std::to_string(gpu);
    auto busy = [gpu](int t) {
      if (t % 600 < 25 && t > 600) return 0.0;
      double x = std::fmod(t + gpu * 0.37, 1.52) / 1.52;
      return x < 0.82 ? 1.0 : 0.35;
    };
    auto energy = std::make_shared<double>(5e9 + gpu);
    auto nvl = std::make_shared<double>(3e12 + gpu * 1e10);
    auto mem = std::make_shared<double>(61.0 * (1 << 30));
    add("gpu_utilization_percent", id, "", [=, &rng, &g](int t) {
      return std::clamp(std::round(100 * (busy(t) > 0.5 ? 0.97 : busy(t) > 0 ? 0.9 : 0.0) + 1.2 * g(rng)), 0.0, 100.0);
    });
    for (const char* r : {"sm", "tensor", "dram"}) {
      add(std::string("gpu_") + r + "_active_ratio", id, "", [=, &rng, &g](int t) {
        if (busy(t) == 0) return 0.0;
        return std::round(std::clamp(busy(t) * 0.6 + 0.02 * g(rng), 0.0, 1.0) * 1e6) / 1e6;
      });
    }
    add("gpu_power_usage_milliwatts", id, "", [=, &rng, &g](int t) {
      return std::trunc((120 + 560 * busy(t) + 18 * g(rng)) * 1000);
    });
    add("gpu_energy_millijoules_total", id, "", [=, &rng, &g](int t) {
      return *energy += std::trunc((120 + 560 * busy(t) + 18 * g(rng)) * 1000);
    });
    add("gpu_temperature_celsius", id, "", [=](int t) { return std::round(60 + 10 * busy(t / 30 * 30)); });
    add("gpu_sm_clock_mhz", id, "", [&rng](int) { return rng() % 25 == 0 ? 1755.0 : 1980.0; });
    add("gpu_memory_used_bytes", id, "", [=, &rng](int) {
      int c = static_cast<int>(rng() % 5);
      return *mem += c == 3 ? 2097152.0 : c == 4 ? -2097152.0 : 0.0;
    });
    for (const char* d : {"tx", "rx"}) {
      add("gpu_pcie_kilobytes_per_second", id, d, [=, &rng, &g](int t) {
        return std::trunc(std::max(0.0, 2.1e6 * busy(t) + 2e5 * g(rng)));
      });
    }
    for (const char* d : {"tx_data", "rx_data", "tx_raw", "rx_raw"}) {
      add("gpu_nvlink_bytes_total", id, d, [=, &rng, &g](int t) {
        return *nvl += std::trunc(std::max(0.0, 3.1e10 * (1 - busy(t) * 0.3) + 1e8 * g(rng)));
      });
    }
    for (int k = 0; k < 17; ++k) {
      double scale = (k * 37) % 97;
      add("gpu_gpm_util", id, std::to_string(k), [=, &rng, &g](int t) {
        if (busy(t) == 0) return 0.0;
        return std::round(std::clamp(scale * busy(t) + 1.5 * g(rng), 0.0, 100.0) * 100) / 100;
      });
    }
    for (int k = 0; k < 65; ++k) {  // flags, error counters, link states, limits: constant
      double v = k % 3 == 0 ? 1.0 : k % 3 == 1 ? 0.0 : 700000.0;
      add("gpu_constant", id, std::to_string(k), [v](int) { return v; });
    }
  }
  for (int t = 0; t < 1200; ++t) {
    for (auto& gen : gens) ASSERT_TRUE(store->Append(gen.ref, Sec(t), gen.next(t)));
  }
  auto st = store->Stats();
  ASSERT_EQ(st.samples_in_memory, gens.size() * 1200);
  double bytes_per_sample = static_cast<double>(st.sample_bytes_in_memory) / static_cast<double>(st.samples_in_memory);
  RecordProperty("bytes_per_sample", fmt::format("{:.3f}", bytes_per_sample));
  EXPECT_LT(bytes_per_sample, 2.0);
  // And it reads back exactly.
  auto r = store->Select(Sel(R"(gpu_nvlink_bytes_total{gpu="3",x="rx_raw"})"), kMinTime, kMaxTime);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().samples.size(), 1200u);
}

}  // namespace
}  // namespace ithbat::store
