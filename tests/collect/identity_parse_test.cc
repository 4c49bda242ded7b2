#include "collect/identity/identity_parse.h"

#include <string>

#include <gtest/gtest.h>

namespace ithbat::collect::identity {
namespace {

using namespace std::string_literals;

TEST(IdentityParse, EnvironKeepsOnlyAllowList) {
  std::string env = "PATH=/usr/bin\0SLURM_JOB_ID=42\0SECRET=hunter2\0RANK=3\0NOEQUALS\0=x\0"
                    "CUDA_VISIBLE_DEVICES=GPU-1,GPU-2\0RANK=9\0LOCAL_RANK="s;
  AllowedEnv e = ParseEnviron(env);
  EXPECT_EQ(e.Get(EnvKey::kSlurmJobId), "42");
  EXPECT_EQ(e.Get(EnvKey::kRank), "3");  // first definition wins, as getenv
  EXPECT_EQ(e.Get(EnvKey::kCudaVisibleDevices), "GPU-1,GPU-2");
  EXPECT_EQ(e.Get(EnvKey::kLocalRank), "");  // the last entry has no NUL
  EXPECT_FALSE(e.Get(EnvKey::kWorldSize).has_value());
  size_t set = 0;
  for (const auto& v : e.values) set += v.has_value();
  EXPECT_EQ(set, 4u);
  EXPECT_TRUE(ParseEnviron("").empty());
  EXPECT_TRUE(ParseEnviron(std::string(1000, '\0')).empty());
}

TEST(IdentityParse, EnvironDropsOverlongValue) {
  std::string env = "RANK=" + std::string(kMaxEnvValueBytes + 1, '1') + '\0' + "WORLD_SIZE=2";
  AllowedEnv e = ParseEnviron(env);
  EXPECT_FALSE(e.Get(EnvKey::kRank).has_value());
  EXPECT_EQ(e.Get(EnvKey::kWorldSize), "2");
}

TEST(IdentityParse, CgroupSlurmV1AndV2) {
  auto v1 = ParseCgroup(
      "12:pids:/slurm/uid_1000/job_4242/step_0/task_1\n"
      "1:name=systemd:/system.slice/slurmd.service\n0::/\n");
  EXPECT_EQ(v1.slurm_job, "4242");
  EXPECT_EQ(v1.slurm_step, "0");
  auto v2 = ParseCgroup("0::/system.slice/slurmstepd.scope/job_77/step_extern/user/task_special\n");
  EXPECT_EQ(v2.slurm_job, "77");
  EXPECT_EQ(v2.slurm_step, "extern");
  EXPECT_EQ(ParseCgroup("0::/user.slice/job_x/step_0\n"), CgroupIdentity{});
}

TEST(IdentityParse, CgroupKubernetesSystemdAndCgroupfs) {
  const std::string cid(64, 'a');
  auto sd = ParseCgroup(
      "0::/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" +
      cid + ".scope\n");
  EXPECT_EQ(sd.pod_uid, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(sd.container_id, cid);
  auto guaranteed = ParseCgroup("0::/kubepods.slice/kubepods-pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice/crio-" +
                                cid + ".scope\n");
  EXPECT_EQ(guaranteed.pod_uid, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(guaranteed.container_id, cid);
  auto fs = ParseCgroup("11:memory:/kubepods/burstable/pod9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4/" +
                        cid + "\n");
  EXPECT_EQ(fs.pod_uid, "9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4");
  EXPECT_EQ(fs.container_id, cid);
  auto docker = ParseCgroup("4:cpu:/docker/" + cid + "\n0::/system.slice/docker-" + cid + ".scope\n");
  EXPECT_EQ(docker.container_id, cid);
  EXPECT_EQ(docker.pod_uid, "");
  // Not Kubernetes: a "pod" component outside kubepods, a short id, a conmon scope.
  EXPECT_EQ(ParseCgroup("0::/user.slice/pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5b.slice\n").pod_uid, "");
  EXPECT_EQ(ParseCgroup("0::/system.slice/docker-abc.scope\n").container_id, "");
  EXPECT_EQ(ParseCgroup("0::/system.slice/crio-conmon-" + cid + ".scope\n").container_id, "");
}

TEST(IdentityParse, CgroupMalformedLinesSkipped) {
  EXPECT_EQ(ParseCgroup("garbage\n:\n1:x\n2:y:relative/job_5\n\xff\xfe::\n"), CgroupIdentity{});
}

TEST(IdentityParse, Status) {
  auto s = ParseStatus("Name:\tsleep\nPid:\t812\nPPid:\t800\nNSpid:\t812\t5\t1\n");
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->ppid, 800);
  EXPECT_EQ(s->nspid, (std::vector<int32_t>{812, 5, 1}));
  auto old_kernel = ParseStatus("PPid:\t1\n");  // before 4.1 there is no NSpid
  ASSERT_TRUE(old_kernel);
  EXPECT_TRUE(old_kernel->nspid.empty());
  EXPECT_EQ(ParseStatus("Name:\tx\n").error().code, ErrorCode::kParse);
  EXPECT_EQ(ParseStatus("PPid:\t-4\n").error().code, ErrorCode::kParse);
  EXPECT_EQ(ParseStatus("PPid:\t1\nNSpid:\t1\tx\n").error().code, ErrorCode::kParse);
}

TEST(IdentityParse, StatStartTime) {
  auto t = ParseStatStartTime(
      "201 (a) b (c)) S 200 201 201 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1 2 3\n");
  ASSERT_TRUE(t) << t.error().ToString();
  EXPECT_EQ(*t, 987654u);
  EXPECT_EQ(ParseStatStartTime("201 (x S 1").error().code, ErrorCode::kParse);
  EXPECT_EQ(ParseStatStartTime("201 (x) S 1 2 3").error().code, ErrorCode::kParse);
}

TEST(IdentityParse, ResolveGpu) {
  EXPECT_EQ(ResolveGpu("3", -1), (GpuRef{3, ""}));
  EXPECT_EQ(ResolveGpu("3", 0), (GpuRef{3, ""}));
  EXPECT_EQ(ResolveGpu("4,5,6,7", 2), (GpuRef{6, ""}));
  EXPECT_EQ(ResolveGpu("4,5", 2), GpuRef{});  // local rank outside the list
  EXPECT_EQ(ResolveGpu("4,5", -1), GpuRef{});
  EXPECT_EQ(ResolveGpu(std::nullopt, 1), (GpuRef{1, ""}));
  EXPECT_EQ(ResolveGpu(std::nullopt, -1), GpuRef{});
  EXPECT_EQ(ResolveGpu("GPU-aa, GPU-bb", 1), (GpuRef{-1, "GPU-bb"}));
  EXPECT_EQ(ResolveGpu("MIG-0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f", 0),
            (GpuRef{-1, "MIG-0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"}));
  EXPECT_EQ(ResolveGpu("MIG-GPU-aa/1/0", -1), (GpuRef{-1, "MIG-GPU-aa/1/0"}));
  EXPECT_EQ(ResolveGpu("", 0), GpuRef{});
  EXPECT_EQ(ResolveGpu("none", 0), GpuRef{});
  EXPECT_EQ(ResolveGpu("-1", 0), GpuRef{});
}

TEST(IdentityParse, Scontrol) {
  auto j = ParseScontrolJob(
      "JobId=17 JobName=my train job UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
      "Priority=1 JobState=RUNNING Reason=None Partition=gpu NodeList=node[01-04] "
      "BatchHost=node01 NumNodes=4 NumCPUs=8 Command=/bin/sleep 30 WorkDir=/tmp\n"
      "JobId=18 JobName=other\n");
  ASSERT_TRUE(j) << j.error().ToString();
  EXPECT_EQ(j->job_id, "17");
  EXPECT_EQ(j->name, "my train job");
  EXPECT_EQ(j->user, "alice");
  EXPECT_EQ(j->partition, "gpu");
  EXPECT_EQ(j->node_list, "node[01-04]");
  EXPECT_EQ(j->num_nodes, 4);
  EXPECT_EQ(j->state, "RUNNING");
  auto pending = ParseScontrolJob("JobId=5 JobName=x NodeList=(null) NumNodes=1-1 JobState=PENDING");
  ASSERT_TRUE(pending);
  EXPECT_EQ(pending->node_list, "");
  EXPECT_EQ(pending->num_nodes, 1);
  EXPECT_EQ(ParseScontrolJob("").error().code, ErrorCode::kParse);
  EXPECT_EQ(ParseScontrolJob("slurm_load_jobs error: Invalid job id").error().code,
            ErrorCode::kParse);
}

}  // namespace
}  // namespace ithbat::collect::identity
