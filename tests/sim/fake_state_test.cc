// The shared fake-hardware state on its own: file format checks, derived values, the bounded
// timeline, and that concurrent readers never see a torn config.
#include "fake_state/fake_state.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "collect/gpu/nvml_abi.h"
#include "fake_state/fake_state_api.h"
#include "testutil/testutil.h"

namespace ithbat::sim {
namespace {

namespace nv = ::ithbat::nvml;

TEST(FakeState, CreateThenOpenSeesTheSameGpus) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "state").string();
  auto created = FakeState::Create(path, {GpuModel::kH100Sxm, GpuModel::kH200Sxm}, "node-a");
  ASSERT_TRUE(created) << created.error().ToString();
  auto opened = FakeState::Open(path);
  ASSERT_TRUE(opened) << opened.error().ToString();
  EXPECT_EQ((*opened)->gpu_count(), 2u);
  auto c0 = (*opened)->Config(0);
  auto c1 = (*opened)->Config(1);
  ASSERT_TRUE(c0 && c1);
  EXPECT_STREQ(c1->name, "NVIDIA H200");
  EXPECT_STRNE(c0->uuid, c1->uuid);
  EXPECT_FALSE((*opened)->Config(2));
  // A write through one mapping is visible through the other.
  ASSERT_TRUE((*created)->AddPcieReplays(1, 3));
  EXPECT_EQ((*opened)->Config(1)->pcie_replay, 3u);
}

TEST(FakeState, SeedsMakeNodesDistinct) {
  testing::TempDir dir;
  auto a = FakeState::CreateDefault((dir.path() / "a").string(), "node-a");
  auto b = FakeState::CreateDefault((dir.path() / "b").string(), "node-b");
  ASSERT_TRUE(a && b);
  EXPECT_STRNE((*a)->Config(0)->uuid, (*b)->Config(0)->uuid);
  EXPECT_STRNE((*a)->Config(0)->serial, (*b)->Config(0)->serial);
}

TEST(FakeState, OpenRefusesForeignFiles) {
  testing::TempDir dir;
  dir.WriteFile("junk", std::string(4096, 'x'));
  auto junk = FakeState::Open((dir.path() / "junk").string());
  ASSERT_FALSE(junk);
  EXPECT_NE(junk.error().message.find("magic"), std::string::npos);
  EXPECT_FALSE(FakeState::Open((dir.path() / "missing").string()));
  const std::string path = (dir.path() / "state").string();
  {
    auto s = FakeState::CreateDefault(path);
    ASSERT_TRUE(s);
    (*s)->layout().header.layout_version = 999;
  }
  auto old = FakeState::Open(path);
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message.find("version"), std::string::npos);
}

TEST(FakeState, InputsAreBounded) {
  testing::TempDir dir;
  auto s = FakeState::CreateDefault((dir.path() / "state").string());
  ASSERT_TRUE(s);
  FakeState& st = **s;
  EXPECT_FALSE(st.AddBusyInterval(0, 10, 10, 0.5, 0, 0));
  EXPECT_FALSE(st.AddBusyInterval(0, 0, 10, 1.5, 0, 0));
  EXPECT_FALSE(st.AddBusyInterval(8, 0, 10, 0.5, 0, 0));
  EXPECT_FALSE(st.AddEccErrors(0, 2, 0, 1));
  EXPECT_FALSE(st.AddNvLinkErrors(0, kMaxNvLinks, 0, 1));
  for (uint32_t pid = 1; pid <= kMaxProcesses; ++pid) ASSERT_TRUE(st.AddProcess(0, pid, 1));
  EXPECT_FALSE(st.AddProcess(0, 9999, 1));
  EXPECT_TRUE(st.RemoveProcess(0, 7));
  EXPECT_FALSE(st.RemoveProcess(0, 7));
  EXPECT_EQ(st.Config(0)->process_count, kMaxProcesses - 1);
  for (uint32_t i = 0; i < kMaxRetiredPages; ++i) ASSERT_TRUE(st.AddRetiredPage(1, 1, 0x1000 * i, true));
  EXPECT_FALSE(st.AddRetiredPage(1, 1, 0xdead000, true));
  EXPECT_FALSE(st.AddRetiredPage(1, 2, 0, false));
  EXPECT_FALSE(st.SetRecoveryAction(1, 99));
  std::vector<GpuModel> too_many(kMaxGpus + 1, GpuModel::kH100Sxm);
  EXPECT_FALSE(FakeState::Create((dir.path() / "big").string(), too_many));
}

TEST(FakeState, EnergyStaysMonotonicWhenTheRingWraps) {
  testing::TempDir dir;
  auto s = FakeState::CreateDefault((dir.path() / "state").string());
  ASSERT_TRUE(s);
  FakeState& st = **s;
  const FakeStateLayout& layout = st.layout();
  const int64_t base = RealtimeNs() - 10'000'000'000;  // 10 s ago: all of it is in the past
  double last = 0;
  for (uint32_t i = 0; i < kTimelineCapacity + 100; ++i) {
    const int64_t t = base + static_cast<int64_t>(i) * 1'000'000;
    ASSERT_TRUE(st.AddBusyInterval(0, t, t + 500'000, 0.8, 0.5, 0.3));
    if (i % 512 == 0 || i > kTimelineCapacity) {
      GpuConfig c = *st.Config(0);
      Derived d;
      ASSERT_TRUE(ComputeDerived(layout, layout.gpus[0], c, base + 20'000'000'000, &d));
      EXPECT_GE(d.energy_mj, last) << i;
      last = d.energy_mj;
    }
  }
  EXPECT_EQ(layout.gpus[0].timeline.head, kTimelineCapacity + 100u);
  EXPECT_GT(layout.gpus[0].timeline.retired_busy_ns, 0);
}

TEST(FakeState, WindowSumsClipAndFilterByPid) {
  testing::TempDir dir;
  auto s = FakeState::CreateDefault((dir.path() / "state").string());
  ASSERT_TRUE(s);
  FakeState& st = **s;
  ASSERT_TRUE(st.AddBusyInterval(2, 1000, 3000, 1.0, 0.5, 0.25, 11));
  ASSERT_TRUE(st.AddBusyInterval(2, 3000, 4000, 0.5, 0.0, 0.0, 22));
  const GpuConfig c = *st.Config(2);
  WindowSums all, one;
  ASSERT_TRUE(SumWindow(st.layout().gpus[2], c, 2000, 5000, 0, &all));
  ASSERT_TRUE(SumWindow(st.layout().gpus[2], c, 2000, 5000, 11, &one));
  EXPECT_DOUBLE_EQ(all.busy_ns, 2000);
  EXPECT_DOUBLE_EQ(all.sm_ns, 1000 * 1.0 + 1000 * 0.5);
  EXPECT_DOUBLE_EQ(one.busy_ns, 1000);
  EXPECT_DOUBLE_EQ(one.tensor_ns, 500);
}

TEST(FakeState, ReadersNeverSeeATornConfig) {
  testing::TempDir dir;
  auto s = FakeState::CreateDefault((dir.path() / "state").string());
  ASSERT_TRUE(s);
  FakeState& st = **s;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 1; !stop.load(); ++i) {
      ASSERT_TRUE(st.Modify(0, [&](GpuConfig& c) {
        for (auto& by_type : c.ecc) {
          for (auto& by_counter : by_type) {
            for (auto& v : by_counter) v = i;
          }
        }
        c.pcie_replay = static_cast<uint32_t>(i);
      }));
    }
  });
  int torn = 0;
  for (int r = 0; r < 20000; ++r) {
    GpuConfig c;
    ASSERT_TRUE(ReadConfig(st.layout().gpus[0], &c));
    const uint64_t first = c.ecc[0][0][0];
    for (auto& by_type : c.ecc) {
      for (auto& by_counter : by_type) {
        for (auto v : by_counter) torn += v != first;
      }
    }
    torn += c.pcie_replay != static_cast<uint32_t>(first);
  }
  stop = true;
  writer.join();
  EXPECT_EQ(torn, 0);
}

TEST(FakeState, NotSupportedMaskCoversEveryNvmlFunction) {
  testing::TempDir dir;
  auto s = FakeState::CreateDefault((dir.path() / "state").string());
  ASSERT_TRUE(s);
  for (const auto& sym : nv::kSymbols) EXPECT_TRUE((*s)->SetNotSupported(3, sym.name, true)) << sym.name;
  const GpuFaults& f = (*s)->layout().gpus[3].faults;
  int bits = __builtin_popcountll(f.nvml_not_supported[0]) + __builtin_popcountll(f.nvml_not_supported[1]);
  EXPECT_EQ(bits, static_cast<int>(nv::kSymbols.size()));
}

}  // namespace
}  // namespace ithbat::sim
