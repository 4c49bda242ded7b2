#include "agent/tracked_processes.h"

#include <gtest/gtest.h>

namespace ithbat::agent {
namespace {

TrackedProcesses::Process P(int32_t pid, std::string job = "") {
  TrackedProcesses::Process p;
  p.pid = pid;
  p.identity.job = std::move(job);
  return p;
}

TEST(TrackedProcessesTest, PublishReplacesTheSourcesSetAndBumpsTheGeneration) {
  TrackedProcesses t;
  EXPECT_EQ(t.generation(), 0u);
  t.Publish("gpu", {P(30, "j"), P(10, "j")});
  EXPECT_EQ(t.generation(), 1u);
  auto s = t.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].pid, 10);  // ordered by pid
  EXPECT_EQ(s[0].source, "gpu");
  EXPECT_EQ(s[0].identity.pid, 10) << "the identity carries the pid";
  t.Publish("gpu", {P(10, "j"), P(30, "j")});
  EXPECT_EQ(t.generation(), 1u) << "the same set in another order is no change";
  t.Publish("gpu", {P(10, "j")});
  EXPECT_EQ(t.generation(), 2u);
  EXPECT_EQ(t.Snapshot().size(), 1u);
}

TEST(TrackedProcessesTest, SourcesAreMergedByPidAndInvalidPidsIgnored) {
  TrackedProcesses t;
  t.Publish("gpu", {P(10, "from-gpu"), P(0), P(-4)});
  t.Publish("config", {P(10, "from-config"), P(20)});
  auto s = t.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].identity.job, "from-config") << "sources are taken in name order: config < gpu";
  EXPECT_EQ(s[1].pid, 20);
  t.Publish("config", {});
  s = t.Snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].identity.job, "from-gpu");
  const uint64_t g = t.generation();
  t.Publish("nobody", {});
  EXPECT_EQ(t.generation(), g) << "clearing a source that had nothing is no change";
}

}  // namespace
}  // namespace ithbat::agent
