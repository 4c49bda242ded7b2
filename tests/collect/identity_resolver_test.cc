#include "collect/identity/identity_resolver.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "testutil/testutil.h"

namespace ithbat::collect::identity {
namespace {

namespace fs = std::filesystem;
using ithbat::testing::SourceDir;
using ithbat::testing::TempDir;

fs::path FixtureProc() { return SourceDir() / "tests/collect/fixtures/identity/proc"; }

IdentityResolver FixtureResolver(const fs::path& root = FixtureProc()) {
  IdentityResolver::Options o;
  o.proc_root = root;
  return IdentityResolver(o);
}

TEST(IdentityResolverFixture, TorchrunWorkerInheritsJobKeepsOwnRank) {
  auto r = FixtureResolver();
  auto w = r.Resolve(201);
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(w->identity.job, "4242");
  EXPECT_EQ(w->slurm_job, "4242");
  EXPECT_EQ(w->slurm_step, "0");
  EXPECT_EQ(w->job_source, "ancestor-cgroup:200");
  EXPECT_EQ(w->identity.rank, 5);  // RANK, not the agent's SLURM_PROCID=1
  EXPECT_EQ(w->identity.local_rank, 1);
  EXPECT_EQ(w->identity.world_size, 8);
  EXPECT_EQ(w->identity.pid, 201);
  EXPECT_EQ(w->ns_pid, 201);
  EXPECT_EQ(w->ppid, 200);
  EXPECT_EQ(w->start_time, 5100u);
  EXPECT_EQ(w->torchelastic_run_id, "");  // "none" is torchrun's default, not an id
  EXPECT_EQ(w->master_addr, "node001");
  EXPECT_EQ(w->identity.gpu_index, 5);  // CUDA_VISIBLE_DEVICES=4,5,6,7 [LOCAL_RANK=1]
  EXPECT_EQ(w->gpu_source, "CUDA_VISIBLE_DEVICES");

  auto agent = r.Resolve(200);
  ASSERT_TRUE(agent);
  EXPECT_EQ(agent->identity.job, "4242");
  EXPECT_EQ(agent->job_source, "cgroup");
  EXPECT_EQ(agent->identity.rank, 1);
  EXPECT_EQ(agent->identity.local_rank, 0);
  EXPECT_EQ(agent->identity.world_size, 2);
  EXPECT_EQ(agent->identity.gpu_index, 0);
  EXPECT_EQ(agent->gpu_source, "LOCAL_RANK");
}

TEST(IdentityResolverFixture, KubernetesAndContainers) {
  auto r = FixtureResolver();
  auto k = r.Resolve(300);
  ASSERT_TRUE(k) << k.error().ToString();
  EXPECT_EQ(k->identity.job, "run-abc");
  EXPECT_EQ(k->job_source, "torchelastic");
  EXPECT_EQ(k->pod_uid, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(k->container_id, "3f1c0a9be2d84c17a6b5e4d3c2b1a09f8e7d6c5b4a3928170f1e2d3c4b5a6978");
  EXPECT_EQ(k->ns_pid, 1);
  EXPECT_EQ(k->nspid, (std::vector<int32_t>{300, 1}));
  EXPECT_EQ(k->identity.rank, 0);
  EXPECT_EQ(k->identity.world_size, 2);
  EXPECT_EQ(k->identity.gpu_uuid, "GPU-8f2a6c1e-3b4d-5e6f-7a8b-9c0d1e2f3a4b");
  EXPECT_EQ(k->gpu_source, "NVIDIA_VISIBLE_DEVICES");

  auto m = r.Resolve(400);
  ASSERT_TRUE(m) << m.error().ToString();
  EXPECT_EQ(m->identity.job, "9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4");
  EXPECT_EQ(m->job_source, "pod");
  EXPECT_EQ(m->identity.rank, 3);  // OMPI_COMM_WORLD_RANK over PMI_RANK
  EXPECT_EQ(m->identity.world_size, 4);
  EXPECT_EQ(m->identity.local_rank, 1);
  EXPECT_EQ(m->identity.gpu_uuid, "MIG-0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f");
  EXPECT_EQ(m->ns_pid, 17);
  auto attrs = m->Attributes();
  EXPECT_EQ(attrs.size(), 2u);

  auto d = r.Resolve(450);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->identity.job, "");
  EXPECT_EQ(d->job_source, "");
  EXPECT_EQ(d->container_id, k->container_id);
  EXPECT_EQ(d->identity.gpu_index, 2);

  auto b = r.Resolve(500);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->identity.job, "777");
  EXPECT_EQ(b->slurm_step, "batch");
  EXPECT_EQ(b->job_source, "cgroup");
}

TEST(IdentityResolverFixture, NvmlMapWins) {
  auto r = FixtureResolver();
  std::unordered_map<int32_t, GpuRef> nvml{{201, GpuRef{2, "GPU-nvml"}}};
  auto w = r.Resolve(201, &nvml);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->identity.gpu_index, 2);
  EXPECT_EQ(w->identity.gpu_uuid, "GPU-nvml");
  EXPECT_EQ(w->gpu_source, "nvml");
  auto a = r.Resolve(200, &nvml);  // not in the map: the environment decides
  ASSERT_TRUE(a);
  EXPECT_EQ(a->gpu_source, "LOCAL_RANK");
}

TEST(IdentityResolverFixture, MalformedAndMissing) {
  auto r = FixtureResolver();
  EXPECT_EQ(r.Resolve(600).error().code, ErrorCode::kParse);
  EXPECT_EQ(r.Resolve(601).error().code, ErrorCode::kParse);
  EXPECT_EQ(r.Resolve(99999).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(r.Resolve(0).error().code, ErrorCode::kInvalidArgument);
}

TEST(IdentityResolverFixture, SecretsNeverInResult) {
  auto r = FixtureResolver();
  for (int pid : {200, 201}) {
    auto id = r.Resolve(pid);
    ASSERT_TRUE(id);
    std::string all = id->DebugString();
    for (const auto& [k, v] : id->Attributes()) all += k + v;
    for (const auto& [k, v] : id->identity.ToLabelPairs()) all += k + v;
    EXPECT_EQ(all.find("fixture-secret"), std::string::npos) << all;
    EXPECT_EQ(all.find("hf_fixture_secret"), std::string::npos) << all;
    EXPECT_EQ(all.find("AWS_SECRET"), std::string::npos) << all;
  }
}

TEST(IdentityResolverFixture, EnvironOverBoundIsTruncated) {
  TempDir dir;
  fs::copy(FixtureProc(), dir.path(), fs::copy_options::recursive);
  std::string env = std::string("RANK=7") + '\0' + "JUNK=" + std::string(200, 'x') + '\0' +
                    "WORLD_SIZE=9" + '\0';
  dir.WriteFile("1/environ", env);
  dir.WriteFile("1/cgroup", "");
  IdentityResolver::Options o;
  o.proc_root = dir.path();
  o.environ_max_bytes = 64;
  IdentityResolver r(o);
  auto id = r.Resolve(1);
  ASSERT_TRUE(id) << id.error().ToString();
  EXPECT_TRUE(id->environ_truncated);
  EXPECT_EQ(id->identity.rank, 7);
  EXPECT_EQ(id->identity.world_size, -1);  // beyond the bound
}

TEST(IdentityResolverFixture, PidReuseDetectedByStartTime) {
  TempDir dir;
  fs::copy(FixtureProc(), dir.path(), fs::copy_options::recursive);
  IdentityResolver::Options o;
  o.proc_root = dir.path();
  IdentityResolver r(o);
  auto first = r.Resolve(450);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->identity.local_rank, 2);
  // Same start time: the cached record is used even though environ changed on disk.
  dir.WriteFile("450/environ", std::string("LOCAL_RANK=6") + '\0');
  auto cached = r.Resolve(450);
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->identity.local_rank, 2);
  // A new process with the same pid: another start time, so everything is re-read.
  std::string stat = *ReadFileBounded(dir.path() / "450/stat", 4096);
  stat.replace(stat.find(" 8100 "), 6, " 8200 ");
  dir.WriteFile("450/stat", stat);
  auto reused = r.Resolve(450);
  ASSERT_TRUE(reused);
  EXPECT_EQ(reused->start_time, 8200u);
  EXPECT_EQ(reused->identity.local_rank, 6);
  // Forget drops the record; the process is gone from the tree -> kNotFound.
  r.Forget(450);
  fs::remove_all(dir.path() / "450");
  EXPECT_EQ(r.Resolve(450).error().code, ErrorCode::kNotFound);
}

// --- Real processes, resolved through the real /proc. ---

// A child running argv with exactly `env`, returned once exec has happened (the CLOEXEC pipe
// closes), so /proc/<pid>/environ is the new program's.
struct Child {
  pid_t pid = -1;
  ~Child() { Stop(); }
  void Stop() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
};

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int stdout_fd = -1) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    if (stdout_fd >= 0) dup2(stdout_fd, 1);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(p[1]);
  char c;
  while (read(p[0], &c, 1) < 0 && errno == EINTR) {
  }
  close(p[0]);
  return pid;
}

// Waits (bounded) until pid runs `comm`: a grandchild started by a shell has not exec'd yet
// when its pid is printed.
bool WaitForComm(pid_t pid, const std::string& comm) {
  for (int i = 0; i < 500; ++i) {
    auto c = ReadFileBounded(fs::path("/proc") / std::to_string(pid) / "comm", 256);
    if (c && *c == comm + "\n") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(IdentityResolverReal, SleepWithChosenEnvironmentAndSecret) {
  const std::string secret = "s3cr3t-9f8e7d-never-leak";
  Child c;
  c.pid = Spawn({"/bin/sleep", "30"},
                {"SLURM_JOB_ID=31337", "SLURM_STEP_ID=2", "SLURM_PROCID=1", "SLURM_NTASKS=4",
                 "SLURM_LOCALID=1", "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "MY_API_KEY=" + secret});
  ASSERT_GT(c.pid, 0);
  IdentityResolver r;
  auto id = r.Resolve(c.pid);
  ASSERT_TRUE(id) << id.error().ToString();
  EXPECT_EQ(id->identity.pid, c.pid);
  EXPECT_EQ(id->identity.job, "31337");
  EXPECT_EQ(id->job_source, "env");
  EXPECT_EQ(id->slurm_step, "2");
  EXPECT_EQ(id->identity.rank, 1);
  EXPECT_EQ(id->identity.world_size, 4);
  EXPECT_EQ(id->identity.local_rank, 1);
  EXPECT_EQ(id->identity.gpu_uuid, "GPU-b");
  EXPECT_EQ(id->ppid, getpid());
  EXPECT_EQ(id->environ_error, "");
  EXPECT_FALSE(id->environ_truncated);
  std::string all = id->DebugString();
  for (const auto& [k, v] : id->Attributes()) all += k + v;
  for (const auto& [k, v] : id->identity.ToLabelPairs()) all += k + v;
  EXPECT_EQ(all.find(secret), std::string::npos) << all;
  EXPECT_EQ(all.find("MY_API_KEY"), std::string::npos) << all;
}

TEST(IdentityResolverReal, WorkerUnderLauncherInheritsJob) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  Child parent;
  parent.pid = Spawn({"/bin/sh", "-c",
                      "/usr/bin/env -i RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 /bin/sleep 30 & echo $!; "
                      "wait"},
                     {"PATH=/usr/bin:/bin", "SLURM_JOB_ID=9001", "SLURM_STEP_ID=0",
                      "SLURM_PROCID=0", "SLURM_NTASKS=1"},
                     out[1]);
  close(out[1]);
  ASSERT_GT(parent.pid, 0);
  std::string line;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  close(out[0]);
  ASSERT_FALSE(line.empty());
  Child worker;  // killed first on every exit path; the shell reaps it
  worker.pid = std::stoi(line);
  ASSERT_TRUE(WaitForComm(worker.pid, "sleep"));
  IdentityResolver r;
  auto w = r.Resolve(worker.pid);
  ASSERT_TRUE(w) << w.error().ToString();
  EXPECT_EQ(w->identity.job, "9001");
  EXPECT_EQ(w->job_source, fmt::format("ancestor-env:{}", parent.pid));
  EXPECT_EQ(w->slurm_step, "0");
  EXPECT_EQ(w->identity.rank, 1);
  EXPECT_EQ(w->identity.local_rank, 1);
  EXPECT_EQ(w->identity.world_size, 2);
  EXPECT_EQ(w->ppid, parent.pid);
  auto p = r.Resolve(parent.pid);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->identity.rank, 0);
}

TEST(IdentityResolverReal, ChildInNewPidNamespace) {
  ASSERT_EQ(geteuid(), 0u) << "this test needs root (CI runs tests as root): unshare(CLONE_NEWPID)";
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  pid_t mid = fork();
  ASSERT_GE(mid, 0);
  if (mid == 0) {
    // The intermediate process unshares, so the test process keeps its own namespace.
    int32_t msg = 0;
    if (unshare(CLONE_NEWPID) != 0) {
      msg = -errno;
      (void)!write(p[1], &msg, sizeof(msg));
      _exit(1);
    }
    pid_t inner = fork();
    if (inner == 0) {
      char* argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("30"), nullptr};
      char* envp[] = {const_cast<char*>("RANK=4"), nullptr};
      execve(argv[0], argv, envp);
      _exit(127);
    }
    msg = inner;
    (void)!write(p[1], &msg, sizeof(msg));
    waitpid(inner, nullptr, 0);
    _exit(0);
  }
  close(p[1]);
  int32_t msg = 0;
  ssize_t got = read(p[0], &msg, sizeof(msg));
  close(p[0]);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(msg)));
  if (msg < 0) {
    waitpid(mid, nullptr, 0);
    FAIL() << "unshare(CLONE_NEWPID) refused: " << std::strerror(-msg)
           << " (the test needs root with CAP_SYS_ADMIN)";
  }
  pid_t inner = msg;
  ASSERT_TRUE(WaitForComm(inner, "sleep"));
  IdentityResolver r;
  auto id = r.Resolve(inner);
  kill(inner, SIGKILL);
  waitpid(mid, nullptr, 0);
  ASSERT_TRUE(id) << id.error().ToString();
  EXPECT_EQ(id->identity.pid, inner);
  EXPECT_EQ(id->ns_pid, 1);
  ASSERT_EQ(id->nspid.size(), 2u);
  EXPECT_EQ(id->nspid[0], inner);
  EXPECT_EQ(id->identity.rank, 4);
  EXPECT_EQ(id->ppid, mid);
}

TEST(IdentityResolverReal, ExitBetweenListingAndLookup) {
  pid_t pid = Spawn({"/bin/sleep", "30"}, {"RANK=0"});
  ASSERT_GT(pid, 0);
  IdentityResolver r;
  ASSERT_TRUE(r.Resolve(pid));
  EXPECT_GE(r.cached(), 2u);  // self and its ancestors
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto gone = r.Resolve(pid);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
}

TEST(IdentityResolverReal, PidReuseOnRealProcessIsReRead) {
  // The kernel will not hand out the same pid on demand, so reuse on a real pid is shown the
  // other way round: a cached record whose start time no longer matches is replaced. The
  // fixture test above covers the reuse itself.
  Child c;
  c.pid = Spawn({"/bin/sleep", "30"}, {"RANK=2"});
  IdentityResolver r;
  auto a = r.Resolve(c.pid);
  ASSERT_TRUE(a);
  auto b = r.Resolve(c.pid);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->start_time, b->start_time);
  EXPECT_EQ(b->identity.rank, 2);
}

// --- scontrol ---

fs::path WriteScript(const TempDir& dir, const std::string& name, const std::string& body) {
  dir.WriteFile(name, "#!/bin/sh\n" + body);
  fs::permissions(dir.path() / name, fs::perms::owner_all);
  return dir.path() / name;
}

TEST(SlurmJobCache, ParsesAndCaches) {
  TempDir dir;
  auto script = WriteScript(
      dir, "scontrol",
      "echo run >> \"$(dirname \"$0\")/runs\"\n"
      "[ \"$1 $2 $3 $4\" = \"show job -o 55\" ] || exit 1\n"
      "echo 'JobId=55 JobName=train UserId=bob(1001) JobState=RUNNING Partition=gpu "
      "NodeList=n1 NumNodes=1'\n");
  SlurmJobCache::Options o;
  o.scontrol = script.string();
  SlurmJobCache cache(o);
  auto j = cache.Get("55");
  ASSERT_TRUE(j) << j.error().ToString();
  EXPECT_EQ(j->name, "train");
  EXPECT_EQ(j->user, "bob");
  EXPECT_EQ(j->partition, "gpu");
  ASSERT_TRUE(cache.Get("55"));
  EXPECT_EQ(cache.runs(), 1);
  // An unknown job (exit 1) is kNotFound and cached too.
  EXPECT_EQ(cache.Get("56").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cache.Get("56").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cache.runs(), 2);
  EXPECT_EQ(cache.Get("5;rm -rf /").error().code, ErrorCode::kInvalidArgument);
}

TEST(SlurmJobCache, MissingScontrolOnce) {
  SlurmJobCache::Options o;
  o.scontrol = "/nonexistent/scontrol";
  SlurmJobCache cache(o);
  EXPECT_EQ(cache.Get("1").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cache.Get("2").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cache.runs(), 1);
}

TEST(SlurmJobCache, HungScontrolIsKilled) {
  TempDir dir;
  SlurmJobCache::Options o;
  o.scontrol = WriteScript(dir, "scontrol", "exec sleep 30\n").string();
  o.timeout = std::chrono::milliseconds(200);
  SlurmJobCache cache(o);
  EXPECT_EQ(cache.Get("1").error().code, ErrorCode::kTimeout);
}

TEST(RunCommandBounded, OutputBound) {
  auto r = RunCommandBounded({"/bin/sh", "-c", "head -c 100000 /dev/zero"},
                             std::chrono::milliseconds(5000), 64 * 1024);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  auto ok = RunCommandBounded({"/bin/echo", "hi"}, std::chrono::milliseconds(5000), 1024);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, "hi\n");
  EXPECT_EQ(RunCommandBounded({"/bin/false"}, std::chrono::milliseconds(5000), 1024).error().code,
            ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace ithbat::collect::identity
