#include "runner/world.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/time.h"
#include "net/net_state.h"
#include "node/node_world.h"
#include "node/storage.h"
#include "runner/plan.h"
#include "runner/process.h"
#include "runner/story.h"
#include "runner/world_record.h"
#include "scenario/magnitude.h"
#include "scenario/rng.h"
#include "scenario/scenario.h"
#include "workload/serve_spec.h"
#include "workload/train_spec.h"

namespace ithbat::sim::runner {
namespace {

namespace fs = std::filesystem;
using scenario::EnumName;
using scenario::EventKind;

volatile sig_atomic_t g_stop = 0;

// Host jitter (background.host_jitter_processes): real processes that wake at random and burn a
// little CPU, like the daemons, monitoring agents and kernel threads of a real node. Their total
// is kept to a quarter of one core, whatever their number, so a world of 16+ ranks still runs on
// a 2-core machine; what matters for the ranks is the preemption at random moments, not the sum.
constexpr double kJitterTotalCores = 0.25;
constexpr double kJitterMaxDuty = 0.5;
constexpr double kJitterPeriodMinMs = 20;
constexpr double kJitterPeriodMaxMs = 200;
constexpr int64_t kTickNs = 250'000'000;
constexpr int64_t kLoopSleepUs = 50'000;
constexpr int64_t kWorldWriteEveryNs = 1'000'000'000;

int64_t MonoNs() { return MonotonicNowNs(); }

// Seconds from options (hold, waits, graces) as ns, clamped so a huge or NaN value cannot
// overflow int64 (1e7 s: about four months, more than any run).
int64_t SecondsToNs(double s) {
  if (!(s > 0)) return 0;
  return static_cast<int64_t>(std::min(s, 1e7) * 1e9);
}

// Writes (truncates) or appends a file the runner owns under the run dir, never through a
// symbolic link planted there.
Status WriteRunFile(const fs::path& path, std::string_view text, bool append = false) {
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ErrnoError(ErrorCode::kIo, path.string(), errno);
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoError(ErrorCode::kIo, path.string(), err);
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return Ok();
}

// libfaketime's multi-threaded preload library (Debian package libfaketime), "" when missing.
fs::path FindLibFaketime() {
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime",
                          "/usr/lib/faketime", "/usr/local/lib/faketime"}) {
    const fs::path lib = fs::path(dir) / "libfaketimeMT.so.1";
    if (access(lib.c_str(), R_OK) == 0) return lib;
  }
  return {};
}

std::string Tail(const fs::path& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "(no log)";
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0));
  in.seekg(static_cast<std::streamoff>(size > bytes ? size - bytes : 0));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

std::optional<int64_t> ReadProgressStep(const fs::path& path) {
  std::ifstream in(path);
  int64_t step = 0;
  if (in >> step) return step;
  return std::nullopt;
}

enum class ChildKind { kAgent, kLauncher, kJitter, kContention, kServer };

struct Child {
  pid_t pid = -1;
  ChildKind kind = ChildKind::kJitter;
  size_t owner = 0;  // node (agent), job (launcher), event (contention)
  size_t sub = 0;    // the job's node (launcher)
  bool alive = true;
  int status = 0;
};

struct JobRt {
  enum class State { kPending, kRunning, kEnded } state = State::kPending;
  double start_real_s = 0;
  std::string held_by;    // why it waits past its start ("" = it does not)
  double held_since = 0;  // world seconds
  std::vector<RankPlace> places;
  std::vector<size_t> launchers;  // into children_
  fs::path dir;
};

struct EventRt {
  bool started = false;
  bool ended = false;
  double fired_real_s = 0;          // world seconds
  std::vector<int64_t> job_steps;   // each job's completed step when it fired (-1: not running)
  double end_real_s = -1;  // < 0: never
  std::vector<size_t> burners;
};

struct TenantRt {
  size_t index = 0;
  double start_real_s = 0;
  double end_real_s = -1;
  std::vector<uint32_t> slots;
};

class World {
 public:
  explicit World(const RunOptions& o) : o_(o), t0_(MonoNs()) {}
  ~World() { Shutdown(); }

  int Run() {
    if (auto ok = Setup(); !ok) {
      Log("setup failed: {}", ok.error().message);
      record_.phase = "failed";
      record_.stop_reason = "setup_failed";
      Shutdown();
      return 1;
    }
    Loop();
    Shutdown();
    return 0;
  }

 private:
  template <class... Args>
  void Log(fmt::format_string<Args...> f, Args&&... args) {
    const double t = static_cast<double>(MonoNs() - t0_) / 1e9;
    std::string line = fmt::format("[{:6.1f}s] ", t) + fmt::format(f, std::forward<Args>(args)...);
    if (o_.log) {
      o_.log(line);
    } else {
      fmt::print(stderr, "{}\n", line);
    }
  }

  double WorldSeconds() const { return world_t0_ == 0 ? 0 : static_cast<double>(MonoNs() - world_t0_) / 1e9; }

  // ---- setup ----------------------------------------------------------------------------

  Status Setup() {
    if (auto ok = Load(); !ok) return ok;
    if (auto ok = MakeRunDir(); !ok) return ok;
    WriteWorld();
    if (auto ok = MakeNet(); !ok) return ok;
    if (auto ok = MakeNodes(); !ok) return ok;
    if (auto ok = MakeStorage(); !ok) return ok;
    WriteWorld();
    if (auto ok = StartAgents(); !ok) return ok;
    if (g_stop) return MakeError(ErrorCode::kUnavailable, "interrupted");
    StartJitter();
    PlanTenants();
    MarkWorldStart();
    record_.phase = "running";
    for (size_t i = 0; i < s_.inference.size(); ++i) {
      if (auto ok = StartServer(i); !ok) return ok;
    }
    WriteWorld();
    Log("world running for {:.1f} s (time compression {}, byte scale {})", duration_real_s_, c_, byte_scale_);
    return Ok();
  }

  Status Load() {
    auto parsed = scenario::ParseScenarioFile(o_.scenario_file.string());
    if (!parsed.scenario) {
      std::string all;
      for (const auto& issue : parsed.issues) all += "\n  " + issue.ToString(o_.scenario_file.string());
      return MakeErrorF(ErrorCode::kInvalidArgument, "{} is not a valid scenario:{}",
                        o_.scenario_file.string(), all);
    }
    unresolved_ = o_.quick ? scenario::QuickVariant(*parsed.scenario) : *parsed.scenario;
    seed_ = o_.seed ? *o_.seed : (unresolved_.seed ? *unresolved_.seed : scenario::DrawSeed());
    Log("scenario {} seed {}{}", unresolved_.name, seed_, o_.quick ? " (quick)" : "");
    auto resolved = scenario::Resolve(unresolved_, seed_);
    if (!resolved) return MakeErrorF(ErrorCode::kInvalidArgument, "resolve: {}", resolved.error().message);
    if (auto st = scenario::ScaleFaultMagnitude(*resolved, o_.magnitude); !st) return st;
    if (o_.magnitude != 1.0) Log("fault magnitude {}", o_.magnitude);
    s_ = std::move(*resolved);
    c_ = (s_.time_compression > 0 ? s_.time_compression : 1.0) / std::max(1.0, o_.slowdown);
    if (o_.slowdown > 1.0) Log("slowed down {:g}×: time compression {:g}", o_.slowdown, c_);
    byte_scale_ = ChooseByteScale(s_);
    duration_real_s_ = o_.duration_s > 0 ? o_.duration_s : RealSeconds(s_.duration_s, c_);
    if (auto ok = PlanStory(); !ok) return ok;
    for (const auto& job : s_.jobs)
      training_ranks_ += static_cast<int64_t>(job.nodes.size()) * job.gpus_per_node;
    record_.scenario = s_.name;
    record_.seed = seed_;
    record_.quick = o_.quick;
    record_.magnitude = o_.magnitude;
    record_.time_compression = c_;
    record_.byte_scale = byte_scale_;
    record_.duration_real_s = duration_real_s_;
    for (const auto& e : s_.timeline) {
      EventRecord r;
      r.id = e.id;
      r.kind = std::string(EnumName(e.kind));
      r.node = e.node;
      r.gpu = e.gpu;
      r.nic = e.nic;
      r.mount = e.mount;
      r.job = e.job;
      r.rank = e.rank;
      record_.events.push_back(std::move(r));
    }
    events_.resize(s_.timeline.size());
    timed_order_ = TimedEventOrder(s_);
    jobs_.resize(s_.jobs.size());
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      const auto& job = s_.jobs[j];
      JobRecord r;
      r.id = job.id;
      r.launcher = std::string(EnumName(job.launcher));
      if (job.launcher != scenario::Launcher::kK8s) r.slurm_job_id = SlurmJobId(seed_, j);
      record_.jobs.push_back(std::move(r));
      jobs_[j].start_real_s = RealSeconds(job.start_s, c_);
    }
    for (const auto& inf : s_.inference) {
      ServerRecord r;
      r.id = inf.id;
      r.node = inf.node;
      for (int64_t g = 0; g < inf.gpus; ++g) r.gpus.push_back(g);
      record_.servers.push_back(std::move(r));
    }
    if (!s_.inference.empty() && access((o_.sim_dir / "ithbat-sim-serve").c_str(), X_OK) != 0) {
      return MakeErrorF(ErrorCode::kNotFound, "the inference server {} is not built",
                        (o_.sim_dir / "ithbat-sim-serve").string());
    }
    if (!s_.jobs.empty()) {
      train_ = o_.sim_dir / "ithbat-sim-train";
      if (access(train_.c_str(), X_OK) != 0) {
        return MakeErrorF(ErrorCode::kNotFound, "the rank program {} is not built", train_.string());
      }
    }
    return Ok();
  }

  Status MakeRunDir() {
    std::error_code ec;
    if (o_.root.empty()) {
      std::string tmpl = (fs::temp_directory_path(ec) / "ithbat-sim-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) return ErrnoError(ErrorCode::kIo, "mkdtemp", errno);
      root_ = tmpl;
      created_root_ = true;
    } else {
      // A reused run dir would mix the old world's inject, progress, pid and NCCL id files into
      // the new one: refuse it unless it is empty. The runner's own dir is private (0700).
      root_ = fs::absolute(o_.root, ec);
      if (ec) return MakeErrorF(ErrorCode::kIo, "--root {}: {}", o_.root.string(), ec.message());
      if (root_.has_parent_path()) fs::create_directories(root_.parent_path(), ec);
      if (::mkdir(root_.c_str(), 0700) == 0) {
        created_root_ = true;
      } else if (errno == EEXIST) {
        struct stat st {};
        if (::lstat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          return MakeErrorF(ErrorCode::kInvalidArgument, "--root {} exists and is not a directory",
                            root_.string());
        if (!fs::is_empty(root_, ec) || ec) {
          const std::string why = fmt::format(
              "--root {} already exists and is not empty: a run dir is never reused (a stale world would "
              "mix into this one); remove it or name a new one",
              root_.string());
          root_.clear();  // not ours: no world.json written into it
          return MakeError(ErrorCode::kInvalidArgument, why);
        }
      } else {
        return ErrnoError(ErrorCode::kIo, fmt::format("cannot create {}", root_.string()), errno);
      }
    }
    for (const char* sub : {"nodes", "jobs", "storage"}) fs::create_directories(root_ / sub, ec);
    // The fake NCCL's communicator files live in memory, one directory per world.
    std::string shm = "/dev/shm/ithbat-sim-XXXXXX";
    if (mkdtemp(shm.data()) == nullptr) return ErrnoError(ErrorCode::kIo, "mkdtemp /dev/shm", errno);
    shm_dir_ = shm;
    record_.nccl_shm_dir = shm_dir_.string();
    record_.root = root_.string();
    Log("run dir {}", root_.string());
    return Ok();
  }

  Status MakeNet() {
    nics_ = PlanNics(s_);
    if (nics_.size() > net::kMaxNics)
      return MakeErrorF(ErrorCode::kInvalidArgument, "{} NICs, at most {}", nics_.size(), net::kMaxNics);
    std::vector<net::NicSlot> slots(nics_.size());
    for (size_t i = 0; i < nics_.size(); ++i) {
      net::NicSlot& slot = slots[i];
      std::memset(&slot, 0, sizeof(slot));
      std::snprintf(slot.node, sizeof(slot.node), "%s", nics_[i].node.c_str());
      std::snprintf(slot.name, sizeof(slot.name), "%s", nics_[i].name.c_str());
      slot.node_id = static_cast<uint32_t>(nics_[i].node_index);
      slot.port = static_cast<uint32_t>(nics_[i].port);
      // Transfers take scenario time / c: the line rate is c times the scenario's.
      slot.rate_bps = static_cast<uint64_t>(nics_[i].rate_gbps * 1e9 * c_);
    }
    const char* why = nullptr;
    const fs::path path = root_ / "net.state";
    if (!net_.Create(path.c_str(), slots.data(), static_cast<uint32_t>(slots.size()), &why)) {
      return MakeErrorF(ErrorCode::kIo, "{}: {}", path.string(), why ? why : "?");
    }
    return Ok();
  }

  Status MakeNodes() {
    for (size_t n = 0; n < s_.nodes.size(); ++n) {
      node::NodeWorld::Options no;
      no.dir = root_ / "nodes" / s_.nodes[n].name;
      no.scenario = &s_;
      no.node_index = n;
      no.seed = seed_;
      no.time_compression = c_;
      no.byte_scale = byte_scale_;
      no.net = &net_;
      no.nic_slots = NodeNicSlots(nics_, n);
      no.run_start_ns = NowNs();
      auto nw = node::NodeWorld::Create(no);
      if (!nw) return MakeErrorF(ErrorCode::kIo, "node {}: {}", s_.nodes[n].name, nw.error().message);
      NodeRecord r;
      r.name = s_.nodes[n].name;
      r.index = n;
      r.state = (*nw)->state_path().string();
      r.procfs = (*nw)->procfs().string();
      r.sysfs = (*nw)->sysfs().string();
      r.kmsg = (*nw)->kmsg().string();
      for (const auto& g : (*nw)->gpus()) r.gpus.push_back({static_cast<int64_t>(g.index), g.uuid});
      for (const auto& nic : (*nw)->nics()) r.nics.push_back({nic.name, nic.port, nic.slot, nic.gpus});
      r.clock_skew_ms = s_.nodes[n].clock_skew_ms;
      r.clock_drift_ppm = s_.nodes[n].clock_drift_ppm;
      record_.nodes.push_back(std::move(r));
      nodes_.push_back(std::move(*nw));
      Log("node {}: {} GPUs, {} NICs", s_.nodes[n].name, record_.nodes.back().gpus.size(),
          record_.nodes.back().nics.size());
    }
    return Ok();
  }

  Status MakeStorage() {
    node::Storage::Options so;
    so.root = root_;
    so.scenario = &s_;
    so.time_compression = c_;
    so.byte_scale = byte_scale_;
    so.run_start_ns = NowNs();
    auto st = node::Storage::Create(so);
    if (!st) return MakeErrorF(ErrorCode::kIo, "storage: {}", st.error().message);
    storage_ = std::move(*st);
    for (const auto& m : storage_->mounts()) {
      MountRecord r;
      r.name = m.name;
      r.kind = std::string(EnumName(m.kind));
      for (const auto& [node, path] : m.node_paths) r.nodes[node] = path.string();
      for (const auto& p : m.also_at) r.also_at.push_back(p.string());
      Log("mount {} ({}) on {} node(s)", m.name, r.kind, m.node_paths.size());
      record_.mounts.push_back(std::move(r));
    }
    return Ok();
  }

  // The world's real start, once the agents are up (they can take long to come up): what
  // the storage's io tenants and every scenario time count from.
  // The story the world must tell before it may end (story.h). An explicit real duration
  // (--duration-s) is the caller's to choose: no extension then.
  Status PlanStory() {
    if (o_.duration_s > 0) return Ok();
    milestones_ = ImplicitMilestones(s_);
    for (StoryMilestone m : o_.milestones) {
      if (!m.job.empty() && JobIndex(m.job) >= s_.jobs.size())
        return MakeErrorF(ErrorCode::kInvalidArgument, "story milestone: no job {}", m.job);
      if (!m.event.empty() && EventIndex(m.event) >= s_.timeline.size())
        return MakeErrorF(ErrorCode::kInvalidArgument, "story milestone: no event {}", m.event);
      if (m.why.empty()) m.why = FormatMilestone(m);
      milestones_.push_back(std::move(m));
    }
    for (const auto& m : milestones_) record_.story_milestones.push_back(m.why);
    cap_real_s_ = duration_real_s_ * std::max(1.0, o_.story_cap_factor);
    record_.story_cap_real_s = cap_real_s_;
    return Ok();
  }

  size_t JobIndex(std::string_view id) const {
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      if (s_.jobs[j].id == id) return j;
    }
    return s_.jobs.size();
  }
  size_t EventIndex(std::string_view id) const {
    for (size_t e = 0; e < s_.timeline.size(); ++e) {
      if (s_.timeline[e].id == id) return e;
    }
    return s_.timeline.size();
  }

  // The last step rank 0 of job j completed (its progress file), or nullopt before its first.
  std::optional<int64_t> JobStep(size_t j) const {
    if (jobs_[j].state == JobRt::State::kPending) return std::nullopt;
    return ReadProgressStep(jobs_[j].dir / "rank0.progress");
  }

  void MarkWorldStart() {
    world_t0_ = MonoNs();
    record_.started_ns = NowNs();
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      record_.jobs[j].scripted_start_ns =
          record_.started_ns + static_cast<int64_t>(jobs_[j].start_real_s * 1e9);
    }
    if (storage_) storage_->SetRunStart(record_.started_ns);
    for (auto& node : nodes_) node->SetRunStart(record_.started_ns);
  }

  Status StartAgents() {
    if (!o_.agents) {
      Log("agents off (--no-agents)");
      return Ok();
    }
    if (access(o_.ithbat.c_str(), X_OK) != 0)
      return MakeErrorF(ErrorCode::kNotFound, "no agent binary at {}", o_.ithbat.string());
    const fs::path nvml = o_.sim_dir / "lib" / "libnvidia-ml.so.1";
    const fs::path faketime = o_.faketime.empty() ? FindLibFaketime() : o_.faketime;
    std::vector<int> ports(nodes_.size(), 0);
    std::vector<size_t> child_of(nodes_.size(), 0);
    for (size_t n = 0; n < nodes_.size(); ++n) {
      auto port = FreeLoopbackPort();
      if (!port) return std::unexpected(port.error());
      ports[n] = *port;
      const fs::path dir = root_ / "nodes" / s_.nodes[n].name / "agent";
      std::error_code ec;
      fs::create_directories(dir, ec);
      SpawnOptions so;
      so.path = o_.ithbat.string();
      so.argv = {o_.ithbat.string(), "agent",
                 "--node",           s_.nodes[n].name,
                 "--listen",         fmt::format("127.0.0.1:{}", *port),
                 "--procfs",         nodes_[n]->procfs().string(),
                 "--sysfs",          nodes_[n]->sysfs().string(),
                 "--kmsg",           nodes_[n]->kmsg().string(),
                 "--nvml-library",   nvml.string(),
                 "--data-dir",       dir.string(),
                 "--interval",       "1s",
                 "--log-format",     "json"};
      if (o_.probe_cost_ns > 0) {
        so.argv.push_back("--probe-cost-ns");
        so.argv.push_back(fmt::format("{}", o_.probe_cost_ns));
      }
      so.env = {{"ITHBAT_FAKE_STATE", nodes_[n]->state_path().string()}, {"ITHBAT_SIM_WORLD", root_.string()}};
      so.unset = {"ITHBAT_FAKE_*", "ITHBAT_SIM_*", "LD_PRELOAD", "FAKETIME*"};
      so.output = (dir / "agent.log").string();
      const double skew_ms = s_.nodes[n].clock_skew_ms;
      const double drift_ppm = s_.nodes[n].clock_drift_ppm;
      if (skew_ms != 0 || drift_ppm != 0) {
        if (faketime.empty()) {
          Log("node {}: WARNING libfaketime not found (Debian package libfaketime): the agent runs with the "
              "true clock, not skewed by {} ms / {} ppm",
              s_.nodes[n].name, skew_ms, drift_ppm);
        } else {
          // libfaketime preloaded into the agent itself (not the faketime wrapper, which forks,
          // waits, keeps the agent from our signals and leaves /dev/shm/faketime_* behind):
          // "+<seconds>" offsets the clock, " x<rate>" makes it run at that rate from the start
          // of the process (a drift; the offset must be there for the rate to apply).
          // CLOCK_MONOTONIC stays true, as on a real node whose NTP is off: only the wall clock
          // is wrong. The spec is in the environment, never re-read from a file: the library's
          // cache costs nothing, so FAKETIME_NO_CACHE stays unset. The fraction is parsed in
          // the C locale (the agent never calls setlocale), hence the '.'.
          std::string spec = fmt::format("{:+.3f}", skew_ms / 1000.0);
          if (drift_ppm != 0) spec += fmt::format(" x{:.9f}", 1.0 + drift_ppm * 1e-6);
          so.env.emplace_back("LD_PRELOAD", faketime.string());
          so.env.emplace_back("FAKETIME", spec);
          so.env.emplace_back("FAKETIME_DONT_FAKE_MONOTONIC", "1");
          record_.nodes[n].clock_faked = true;
          Log("node {}: agent clock {} (libfaketime {})", s_.nodes[n].name, spec, faketime.string());
        }
      }
      auto pid = Spawn(so);
      if (!pid)
        return MakeErrorF(ErrorCode::kIo, "node {}: cannot start the agent: {}", s_.nodes[n].name,
                          pid.error().message);
      child_of[n] = AddChild(*pid, ChildKind::kAgent, n, 0);
      record_.nodes[n].agent_pid = *pid;
      record_.nodes[n].agent_data_dir = dir.string();
    }
    // Wait until every agent answers (bounded); a dead one fails the setup with its log's end.
    std::vector<bool> up(nodes_.size(), false);
    const int64_t deadline = MonoNs() + SecondsToNs(o_.agent_wait_s);
    size_t waiting = nodes_.size();
    while (waiting > 0) {
      if (g_stop) return MakeError(ErrorCode::kUnavailable, "interrupted while waiting for the agents");
      ReapChildren();
      for (size_t n = 0; n < nodes_.size(); ++n) {
        if (up[n]) continue;
        const Child& ch = children_[child_of[n]];
        const fs::path log = root_ / "nodes" / s_.nodes[n].name / "agent" / "agent.log";
        if (!ch.alive) {
          return MakeErrorF(ErrorCode::kUnavailable,
                            "node {}: the agent exited (status {}) before answering; end of {}:\n{}",
                            s_.nodes[n].name, ch.status, log.string(), Tail(log, 2048));
        }
        // Up means: /healthz answers 200 with the agent's health document AND the listening
        // socket is our agent's (the port was free when chosen, but another program may have
        // taken it since; its answers must not pass for the agent's).
        auto answer = HttpGet(ports[n], "/healthz", 500);
        if (answer && answer->status == 200 && answer->body.find("\"collectors\"") != std::string::npos &&
            ListenerOwnedBy(ch.pid, ports[n])) {
          up[n] = true;
          --waiting;
          record_.nodes[n].agent_url = fmt::format("http://127.0.0.1:{}", ports[n]);
          Log("node {}: agent up on 127.0.0.1:{} (pid {}, /healthz 200)", s_.nodes[n].name, ports[n], ch.pid);
        }
      }
      if (waiting == 0) break;
      if (MonoNs() > deadline) {
        for (size_t n = 0; n < nodes_.size(); ++n) {
          if (!up[n]) {
            const fs::path log = root_ / "nodes" / s_.nodes[n].name / "agent" / "agent.log";
            return MakeErrorF(ErrorCode::kTimeout,
                              "node {}: the agent did not answer within {} s; end of {}:\n{}",
                              s_.nodes[n].name, o_.agent_wait_s, log.string(), Tail(log, 2048));
          }
        }
      }
      usleep(200'000);
    }
    return Ok();
  }

  void StartJitter() {
    if (!s_.background.enabled || s_.background.host_jitter_processes <= 0) return;
    const int64_t count = std::min<int64_t>(s_.background.host_jitter_processes, 256);
    const double duty = std::min(kJitterMaxDuty, kJitterTotalCores / static_cast<double>(count));
    for (int64_t i = 0; i < count; ++i) {
      SpawnOptions so;
      so.path = o_.self_exe.string();
      so.argv = {
          "host-jitter",     "burn",
          "--duty",          fmt::format("{:.6f}", duty),
          "--period-min-ms", fmt::format("{}", kJitterPeriodMinMs),
          "--period-max-ms", fmt::format("{}", kJitterPeriodMaxMs),
          "--seed",          std::to_string(scenario::FieldSeed(seed_, fmt::format("runner.jitter[{}]", i)))};
      so.env = {{"ITHBAT_SIM_WORLD", root_.string()}};
      so.keep_only = WorkloadAllowList();
      auto pid = Spawn(so);
      if (!pid) {
        Log("host jitter: cannot start a process: {}", pid.error().message);
        break;
      }
      AddChild(*pid, ChildKind::kJitter, static_cast<size_t>(i), 0);
      ++record_.host_jitter_processes;
    }
    Log("host jitter: {} processes, {:.1f}% of a core each", record_.host_jitter_processes, duty * 100);
  }

  void PlanTenants() {
    for (size_t t = 0; t < s_.tenants.size(); ++t) {
      const auto& tenant = s_.tenants[t];
      if (tenant.kind == scenario::TenantKind::kIo || tenant.switch_name.empty() || tenant.traffic_gbps <= 0)
        continue;
      TenantRt rt;
      rt.index = t;
      rt.start_real_s = RealSeconds(tenant.start_s, c_);
      rt.end_real_s = tenant.end_s < 0 ? -1 : RealSeconds(tenant.end_s, c_);
      for (const auto& nic : nics_) {
        if (nic.switch_name == tenant.switch_name) rt.slots.push_back(nic.slot);
      }
      if (!rt.slots.empty()) tenants_.push_back(std::move(rt));
    }
  }

  // ---- the run ---------------------------------------------------------------------------

  void Loop() {
    int64_t last_tick = 0;
    int64_t last_write = MonoNs();
    for (;;) {
      if (g_stop) {
        record_.stop_reason = "signal";
        Log("stopping: signal");
        break;
      }
      const double t = WorldSeconds();
      if (t >= duration_real_s_ && !GoOnForTheStory(t)) break;
      ReapChildren();
      for (size_t j = 0; j < jobs_.size(); ++j) {
        if (jobs_[j].state == JobRt::State::kPending && jobs_[j].start_real_s <= t) MaybeStartJob(j, t);
      }
      RefreshJobs();
      CheckServers();
      while (next_timed_ < timed_order_.size() &&
             RealSeconds(s_.timeline[timed_order_[next_timed_]].at_s, c_) <= t) {
        FireEvent(timed_order_[next_timed_++]);
      }
      CheckStepEvents();
      for (size_t e = 0; e < events_.size(); ++e) {
        if (events_[e].started && !events_[e].ended && events_[e].end_real_s >= 0 &&
            events_[e].end_real_s <= t)
          EndEvent(e);
      }
      const int64_t now = MonoNs();
      if (now - last_tick >= kTickNs) {
        TickWorld(last_tick == 0 ? 0 : static_cast<double>(now - last_tick) / 1e9, t);
        last_tick = now;
      }
      if ((!s_.jobs.empty() || !s_.inference.empty()) && !AnyServerRunning() &&
          std::all_of(jobs_.begin(), jobs_.end(),
                      [](const JobRt& j) { return j.state == JobRt::State::kEnded; })) {
        record_.stop_reason = "jobs_ended";
        Log("stopping: every job has ended");
        break;
      }
      if (dirty_ && now - last_write >= kWorldWriteEveryNs) {
        WriteWorld();
        last_write = now;
      }
      usleep(kLoopSleepUs);
    }
  }

  // Past the duration: whether the world goes on because its story is not told yet (and the cap
  // is not reached). Sets the stop reason when it does not.
  bool GoOnForTheStory(double t) {
    const std::vector<std::string> untold = o_.duration_s > 0 ? std::vector<std::string>{} : UntoldStory(t);
    if (!untold.empty() && t < cap_real_s_) {
      if (!extending_) {
        Log("duration reached; the world goes on until its story is told: {}", fmt::join(untold, "; "));
        extending_ = true;
      }
      story_told_at_ = -1;
      return true;
    }
    if (untold.empty() && extending_) {
      // The story was told past the duration: a few more seconds for the agents to sample it.
      if (story_told_at_ < 0) {
        story_told_at_ = t;
        Log("the story is told");
      }
      if (t < story_told_at_ + kStoryTailRealS && t < cap_real_s_) return true;
    }
    record_.story_untold = untold;
    if (!untold.empty()) {
      record_.stop_reason = "story_cap";
      Log("stopping at the cap ({:.0f} s): the story is not told: {}", cap_real_s_, fmt::join(untold, "; "));
    } else {
      record_.stop_reason = extending_ ? "story_told" : "duration";
      Log("stopping: {}", extending_ ? "the story is told" : "duration reached");
    }
    return false;
  }

  // What the story has not reached yet: jobs that have not started, step events not fired, and
  // milestones. A milestone of a job that ended, or counted from an event that can no longer fire,
  // is not waited for (the lab's story check says what was missed).
  std::vector<std::string> UntoldStory(double t) const {
    std::vector<std::string> out;
    std::vector<std::optional<int64_t>> steps(s_.jobs.size());
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      if (jobs_[j].state == JobRt::State::kRunning) steps[j] = JobStep(j);
      if (jobs_[j].state == JobRt::State::kPending)
        out.push_back(fmt::format("job {} has not started{}", s_.jobs[j].id,
                                  jobs_[j].held_by.empty() ? "" : " (it waits for " + jobs_[j].held_by + ")"));
    }
    auto can_fire = [&](size_t e) {
      if (events_[e].started) return false;
      const auto& ev = s_.timeline[e];
      if (ev.at_step < 0) return true;  // a timed event fires when its time comes
      const size_t j = JobIndex(ev.job);
      return j < jobs_.size() && jobs_[j].state != JobRt::State::kEnded;
    };
    for (size_t e = 0; e < s_.timeline.size(); ++e) {
      const auto& ev = s_.timeline[e];
      if (ev.at_step >= 0 && can_fire(e))
        out.push_back(fmt::format("event {} at step {} of job {}", ev.id.empty() ? fmt::format("#{}", e) : ev.id,
                                  ev.at_step, ev.job));
    }
    for (const auto& m : milestones_) {
      const size_t e = m.event.empty() ? s_.timeline.size() : EventIndex(m.event);
      if (e < s_.timeline.size() && !events_[e].started) {
        if (can_fire(e)) out.push_back(m.why);
        continue;
      }
      if (m.job.empty()) {  // seconds after the event or the start
        const double from = e < s_.timeline.size() ? events_[e].fired_real_s : 0;
        if (t < from + RealSeconds(m.seconds, c_)) out.push_back(m.why);
        continue;
      }
      const size_t j = JobIndex(m.job);
      if (j >= jobs_.size() || jobs_[j].state == JobRt::State::kEnded) continue;
      if (jobs_[j].state == JobRt::State::kPending) {
        out.push_back(m.why);
        continue;
      }
      const int64_t step = steps[j].value_or(scenario::FirstStep(s_.jobs[j]) - 1);
      int64_t target = m.step;
      if (e < s_.timeline.size()) {
        const int64_t base = j < events_[e].job_steps.size() && events_[e].job_steps[j] >= 0
                                 ? events_[e].job_steps[j]
                                 : scenario::FirstStep(s_.jobs[j]) - 1;
        target = base + m.steps;
        if (m.saves > 0) {
          const int64_t every = s_.jobs[j].checkpoint ? s_.jobs[j].checkpoint->every_steps : 0;
          if (every <= 0) continue;  // a job that never saves: nothing to wait for
          target = (base / every + m.saves) * every;
        }
      }
      if (step < target) out.push_back(fmt::format("{} (at step {})", m.why, step));
    }
    return out;
  }

  // Why job j cannot start yet although its time has come ("" = it can): as on a real cluster, a
  // job that resumes from another's checkpoint waits until that checkpoint exists, and a job does
  // not start on GPUs another job or server still holds (Slurm allocates GPUs to one job). On a
  // machine slower than the world's pace this keeps the script's order: without it case04's rerun
  // started on the warm-up's GPUs while the warm-up still ran.
  std::string HeldBy(size_t j) const {
    const auto& job = s_.jobs[j];
    if (!job.after.empty()) {
      const size_t a = JobIndex(job.after);
      if (a < jobs_.size() && jobs_[a].state != JobRt::State::kEnded) return fmt::format("job {} to end", job.after);
    }
    if (job.resume_from) {
      const size_t o = JobIndex(job.resume_from->job);
      if (o < jobs_.size() && jobs_[o].state != JobRt::State::kEnded) {
        const auto step = JobStep(o);
        if (!step || *step < job.resume_from->step)
          return fmt::format("the checkpoint of job {} at step {}", job.resume_from->job, job.resume_from->step);
      }
    }
    const auto mine = GpusOf(j);
    for (size_t k = 0; k < jobs_.size(); ++k) {
      if (k == j || jobs_[k].state != JobRt::State::kRunning) continue;
      for (const auto& g : GpusOf(k)) {
        if (mine.count(g) > 0) return fmt::format("its GPUs, held by job {}", s_.jobs[k].id);
      }
    }
    for (size_t i = 0; i < s_.inference.size(); ++i) {
      if (record_.servers[i].state != "running") continue;
      for (int64_t g = 0; g < s_.inference[i].gpus; ++g) {
        if (mine.count({s_.inference[i].node, g}) > 0)
          return fmt::format("its GPUs, held by server {}", s_.inference[i].id);
      }
    }
    return "";
  }

  std::set<std::pair<std::string, int64_t>> GpusOf(size_t j) const {
    const auto& job = s_.jobs[j];
    std::set<std::pair<std::string, int64_t>> out;
    for (const auto& node : job.nodes) {
      if (job.gpu_indices.empty()) {
        for (int64_t g = 0; g < job.gpus_per_node; ++g) out.insert({node, g});
      } else {
        for (int64_t g : job.gpu_indices) out.insert({node, g});
      }
    }
    return out;
  }

  void MaybeStartJob(size_t j, double t) {
    JobRt& rt = jobs_[j];
    JobRecord& rec = record_.jobs[j];
    const std::string held = HeldBy(j);
    if (!rt.held_by.empty() && !rec.held.empty()) rec.held.back().real_s = t - rt.held_since;
    if (held.empty()) {
      if (!rt.held_by.empty()) {
        Log("job {} no longer waits ({:.1f} s past its start)", s_.jobs[j].id, t - rt.start_real_s);
        rt.held_by.clear();
      }
      (void)StartJob(j);
      return;
    }
    if (held != rt.held_by) {
      Log("job {} waits for {}", s_.jobs[j].id, held);
      rt.held_by = held;
      rt.held_since = t;
      rec.held.push_back({held, 0});
      dirty_ = true;
    }
  }

  Status StartJob(size_t j) {
    JobRt& rt = jobs_[j];
    JobRecord& rec = record_.jobs[j];
    const auto& job = s_.jobs[j];
    rt.state = JobRt::State::kRunning;
    rec.state = "running";
    rec.started_ns = NowNs();
    dirty_ = true;
    auto fail = [&](const std::string& why) {
      Log("job {}: cannot start: {}", job.id, why);
      // Launchers already started on other nodes would run half a job: stop them (reaped by
      // ReapChildren as usual).
      for (size_t c : rt.launchers) KillChild(c, SIGKILL);
      rt.state = JobRt::State::kEnded;
      rec.state = "ended";
      rec.ended_ns = NowNs();
      rec.exit_code = -1;
      return MakeError(ErrorCode::kInternal, why);
    };
    rt.dir = root_ / "jobs" / job.id;
    std::error_code ec;
    fs::create_directories(rt.dir / "nccl", ec);
    auto places = PlaceRanks(s_, j, nics_);
    if (!places) return fail(places.error().message);
    rt.places = std::move(*places);

    SpecContext sc;
    sc.time_compression = c_;
    sc.byte_scale = byte_scale_;
    sc.world_seed = seed_;
    sc.world_training_ranks = training_ranks_;
    // One spec per node when the checkpoint path differs per node (each node sees its mounts
    // under its own directory); spec.json is the first node's.
    std::map<std::string, fs::path> spec_of_node;
    for (size_t jn = 0; jn < job.nodes.size(); ++jn) {
      const std::string& node = job.nodes[jn];
      sc.checkpoint_dir.clear();
      if (job.checkpoint && !job.checkpoint->mount.empty()) {
        auto path = storage_->NodePath(node, job.checkpoint->mount);
        if (!path) return fail(path.error().message);
        sc.checkpoint_dir = (*path / job.id).string();
        fs::create_directories(sc.checkpoint_dir, ec);
      }
      auto spec = BuildTrainSpec(s_, unresolved_, j, sc);
      if (!spec) return fail(spec.error().message);
      const std::string text = workload::TrainSpecToJson(*spec);
      const fs::path file = jn == 0 ? rt.dir / "spec.json" : rt.dir / fmt::format("spec-{}.json", node);
      if (auto ok = WriteRunFile(file, text); !ok) return fail(ok.error().message);
      if (jn == 0 && job.nodes.size() > 1) {
        if (auto ok = WriteRunFile(rt.dir / fmt::format("spec-{}.json", node), text); !ok)
          return fail(ok.error().message);
      }
      spec_of_node[node] = job.nodes.size() > 1 ? rt.dir / fmt::format("spec-{}.json", node) : file;
    }

    for (const auto& p : rt.places) {
      RankRecord rr;
      rr.rank = p.rank;
      rr.local_rank = p.local_rank;
      rr.node = p.node;
      rr.gpu = p.gpu;
      for (const auto& g : record_.nodes[p.node_index].gpus) {
        if (g.index == p.gpu) rr.gpu_uuid = g.uuid;
      }
      rec.ranks.push_back(std::move(rr));
    }
    for (size_t jn = 0; jn < job.nodes.size(); ++jn) {
      const std::string& node = job.nodes[jn];
      size_t node_index = 0;
      for (size_t n = 0; n < s_.nodes.size(); ++n) {
        if (s_.nodes[n].name == node) node_index = n;
      }
      LaunchContext lc;
      lc.lib_dir = o_.sim_dir / "lib";
      lc.state_path = nodes_[node_index]->state_path();
      lc.net_path = root_ / "net.state";
      lc.shm_dir = shm_dir_;
      lc.spec_path = spec_of_node[node];
      lc.job_dir = rt.dir;
      lc.slurm_job_id = rec.slurm_job_id;
      lc.master_addr = job.nodes.front();
      lc.time_compression = c_;
      lc.world_root = root_;
      LaunchDescription d;
      d.style = std::string(EnumName(job.launcher));
      d.job = job.id;
      d.node = node;
      d.process_name = LauncherProcessName(job.launcher);
      d.program = {train_.string(), "--spec", lc.spec_path.string()};
      d.output = (rt.dir / fmt::format("launcher-{}.out", node)).string();
      d.pids = (rt.dir / fmt::format("pids-{}.txt", node)).string();
      for (const auto& p : rt.places) {
        if (p.node != node) continue;
        d.ranks.push_back({p.rank, p.local_rank, RankEnv(s_, j, p, lc)});
      }
      const fs::path desc = rt.dir / fmt::format("launch-{}.json", node);
      if (auto ok = WriteRunFile(desc, LaunchDescriptionToJson(d)); !ok) return fail(ok.error().message);
      SpawnOptions so;
      so.path = o_.self_exe.string();
      so.argv = {d.process_name, "launch", "--desc", desc.string()};
      so.env = LauncherEnv(s_, j, jn, lc);
      so.unset = HostLauncherVariables();
      so.keep_only = WorkloadAllowList();
      so.output = d.output;
      auto pid = Spawn(so);
      if (!pid) return fail(fmt::format("launcher on {}: {}", node, pid.error().message));
      rt.launchers.push_back(AddChild(*pid, ChildKind::kLauncher, j, jn));
    }
    Log("job {} started: {} ranks on {} node(s), launcher {}", job.id, rt.places.size(), job.nodes.size(),
        EnumName(job.launcher));
    return Ok();
  }

  // An inference server (`inference[i]`) from world time 0 until the end: `vllm serve ...`
  // (a link named vllm to ithbat-sim-serve) with its ServeSpec in real units, on the node's first
  // `gpus` GPUs, on a free port (several nodes' servers share this machine's loopback).
  Status StartServer(size_t i) {
    const auto& inf = s_.inference[i];
    ServerRecord& rec = record_.servers[i];
    const size_t node_index = NodeIndex(inf.node);
    if (node_index >= nodes_.size())
      return MakeErrorF(ErrorCode::kInvalidArgument, "server {}: no node {}", inf.id, inf.node);
    const fs::path dir = root_ / "jobs" / inf.id;
    std::error_code ec;
    fs::create_directories(dir / "bin", ec);
    const fs::path vllm = dir / "bin" / "vllm";
    fs::remove(vllm, ec);
    fs::create_symlink(o_.sim_dir / "ithbat-sim-serve", vllm, ec);
    if (ec) return MakeErrorF(ErrorCode::kIo, "server {}: {}: {}", inf.id, vllm.string(), ec.message());
    auto port = FreeLoopbackPort();
    if (!port) return std::unexpected(port.error());
    workload::ServeSpec spec = workload::ServeSpecFromScenario(
        inf, scenario::FieldSeed(seed_, fmt::format("runner.inference[{}].seed", i)), c_);
    spec.port = *port;
    if (auto ok = WriteRunFile(dir / "spec.json", workload::ServeSpecToJson(spec)); !ok)
      return MakeErrorF(ErrorCode::kIo, "server {}: {}", inf.id, ok.error().message);
    LaunchContext lc;
    lc.lib_dir = o_.sim_dir / "lib";
    lc.state_path = nodes_[node_index]->state_path();
    lc.net_path = root_ / "net.state";
    lc.shm_dir = shm_dir_;
    lc.spec_path = dir / "spec.json";
    lc.job_dir = dir;
    lc.time_compression = c_;
    lc.world_root = root_;
    SpawnOptions so;
    so.path = vllm.string();
    so.argv = ServerArgv(inf, spec.model, vllm.string(), *port);
    so.env = ServerEnv(inf, node_index, lc);
    so.unset = HostLauncherVariables();
    so.keep_only = WorkloadAllowList();
    so.output = (dir / "server.out").string();
    auto pid = Spawn(so);
    if (!pid) return MakeErrorF(ErrorCode::kIo, "server {}: {}", inf.id, pid.error().message);
    AddChild(*pid, ChildKind::kServer, i, 0);
    rec.pid = *pid;
    rec.port = *port;
    // url: set by CheckServers once /metrics answers 200 from this server's own socket.
    rec.state = "running";
    rec.started_ns = NowNs();
    Log("server {} started on node {}: vllm serve on 127.0.0.1:{} ({} GPUs, tp {}, {})", inf.id, inf.node,
        *port, inf.gpus, inf.tensor_parallel, EnumName(inf.engine));
    return Ok();
  }

  // A started server is "up" (world.json url set) when /metrics answers 200 on its port and the
  // listening socket is the server's own, not a foreign program's on a reused port. Polled from
  // the loop with a short timeout: the world does not wait for a server to load its model.
  void CheckServers() {
    const int64_t now = MonoNs();
    if (now - last_server_check_ < kTickNs) return;
    last_server_check_ = now;
    for (auto& rec : record_.servers) {
      if (rec.state != "running" || !rec.url.empty() || rec.port <= 0) continue;
      auto answer = HttpGet(static_cast<int>(rec.port), "/metrics", 200, 0);
      if (!answer || answer->status != 200 || !ListenerOwnedBy(static_cast<pid_t>(rec.pid), static_cast<int>(rec.port)))
        continue;
      rec.url = fmt::format("http://127.0.0.1:{}", rec.port);
      dirty_ = true;
      Log("server {} answering on {}", rec.id, rec.url);
    }
  }

  bool AnyServerRunning() const {
    return std::any_of(record_.servers.begin(), record_.servers.end(),
                       [](const ServerRecord& r) { return r.state == "running"; });
  }

  // Rank pids from the launchers' reports; the end of a job when its last launcher exited.
  void RefreshJobs() {
    for (size_t j = 0; j < jobs_.size(); ++j) {
      JobRt& rt = jobs_[j];
      if (rt.state != JobRt::State::kRunning) continue;
      ReadPidReports(j);
      bool all_done = !rt.launchers.empty();
      for (size_t c : rt.launchers) all_done = all_done && !children_[c].alive;
      if (!all_done) continue;
      JobRecord& rec = record_.jobs[j];
      ReadPidReports(j);
      rt.state = JobRt::State::kEnded;
      rec.state = "ended";
      rec.ended_ns = NowNs();
      int code = 0;
      for (const auto& r : rec.ranks) {
        if (r.exit_code && *r.exit_code != 0 && code == 0) code = static_cast<int>(*r.exit_code);
      }
      for (size_t c : rt.launchers) {
        const int st = children_[c].status;
        const int lc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code == 0 && lc != 0) code = lc;
      }
      rec.exit_code = code;
      MergeTruth(rt.dir, rec);
      dirty_ = true;
      Log("job {} ended: exit {}, {} steps done", rec.id, code, rec.steps_done);
    }
  }

  void ReadPidReports(size_t j) {
    JobRecord& rec = record_.jobs[j];
    for (const auto& node : s_.jobs[j].nodes) {
      std::ifstream in(jobs_[j].dir / fmt::format("pids-{}.txt", node));
      if (!in) continue;
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const PidReport report = ParsePidReport(text);
      for (auto& r : rec.ranks) {
        for (const auto& [rank, pid] : report.started) {
          if (rank == r.rank && r.pid != pid) {
            r.pid = pid;
            dirty_ = true;
          }
        }
        for (const auto& [rank, code] : report.exited) {
          if (rank == r.rank && r.exit_code != code) {
            r.exit_code = code;
            dirty_ = true;
          }
        }
      }
    }
  }

  void CheckStepEvents() {
    for (size_t e = 0; e < s_.timeline.size(); ++e) {
      const auto& ev = s_.timeline[e];
      if (events_[e].started || ev.at_step < 0 || ev.job.empty()) continue;
      for (size_t j = 0; j < s_.jobs.size(); ++j) {
        if (s_.jobs[j].id != ev.job || jobs_[j].state != JobRt::State::kRunning) continue;
        auto step = ReadProgressStep(jobs_[j].dir / "rank0.progress");
        if (step && *step >= ev.at_step) FireEvent(e);
      }
    }
  }

  size_t NodeIndex(const std::string& name) const {
    for (size_t n = 0; n < s_.nodes.size(); ++n) {
      if (s_.nodes[n].name == name) return n;
    }
    return s_.nodes.size();
  }

  void FireEvent(size_t e) {
    const auto& ev = s_.timeline[e];
    EventRt& rt = events_[e];
    EventRecord& rec = record_.events[e];
    if (rt.started) return;
    rt.started = true;
    dirty_ = true;
    const Event real = RealEvent(ev, c_);
    const int64_t now = NowNs();
    rec.started_ns = now;
    rt.fired_real_s = WorldSeconds();
    rt.job_steps.assign(s_.jobs.size(), -1);
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      if (jobs_[j].state == JobRt::State::kRunning) rt.job_steps[j] = JobStep(j).value_or(-1);
      if (s_.jobs[j].id == ev.job) rec.fired_step = rt.job_steps[j];
    }
    const std::string name = ev.id.empty() ? fmt::format("#{}", e) : ev.id;
    Log("event {} ({}) started", name, EnumName(ev.kind));
    if (const size_t n = NodeIndex(ev.node); n < nodes_.size()) {
      if (auto ok = nodes_[n]->StartEvent(real, now); !ok)
        Log("event {}: node {}: {}", name, ev.node, ok.error().message);
    }
    if (storage_ && !ev.mount.empty()) {
      if (auto ok = storage_->StartEvent(real, now); !ok)
        Log("event {}: storage: {}", name, ok.error().message);
    }
    if (ev.kind == EventKind::kRankHang) {
      for (size_t j = 0; j < s_.jobs.size(); ++j) {
        if (s_.jobs[j].id == ev.job) Inject(j, ev.rank, fmt::format("hang {}", ev.collective), rec);
      }
    }
    if (IsGpuFault(ev.kind)) {
      const std::string line = EffectInjectLine(ev.effect);
      for (size_t j = 0; j < s_.jobs.size() && !line.empty(); ++j) {
        if (jobs_[j].state != JobRt::State::kRunning) continue;
        for (const auto& p : jobs_[j].places) {
          if (p.node == ev.node && p.gpu == ev.gpu) Inject(j, p.rank, line, rec);
        }
      }
    }
    if (ev.kind == EventKind::kHostCpuContention) StartContention(e, ev);
    for (const auto& effect : rec.effects) Log("event {}: injected {}", name, effect);
    rt.end_real_s = real.duration_s > 0 ? WorldSeconds() + real.duration_s : -1;
  }

  // Other users' processes on the node: burners at full duty, as many as the CPU share of this
  // machine's cores the event takes (at least one). The ranks are not pinned, so the burners
  // compete with them on every core, as on a node without CPU isolation.
  void StartContention(size_t e, const Event& ev) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const int count = std::max(1, static_cast<int>(std::lround(std::clamp(ev.cpu_share, 0.0, 1.0) * cores)));
    for (int i = 0; i < count; ++i) {
      SpawnOptions so;
      so.path = o_.self_exe.string();
      so.argv = {"cpu-contention",  "burn",
                 "--duty",          "1",
                 "--period-min-ms", "100",
                 "--period-max-ms", "100",
                 "--seed",          std::to_string(i)};
      so.env = {{"ITHBAT_SIM_NODE_ID", std::to_string(NodeIndex(ev.node))}, {"ITHBAT_SIM_WORLD", root_.string()}};
      so.keep_only = WorkloadAllowList();
      auto pid = Spawn(so);
      if (!pid) {
        Log("contention: {}", pid.error().message);
        break;
      }
      events_[e].burners.push_back(AddChild(*pid, ChildKind::kContention, e, 0));
    }
  }

  void EndEvent(size_t e) {
    const auto& ev = s_.timeline[e];
    EventRt& rt = events_[e];
    rt.ended = true;
    dirty_ = true;
    const Event real = RealEvent(ev, c_);
    const int64_t now = NowNs();
    record_.events[e].ended_ns = now;
    if (const size_t n = NodeIndex(ev.node); n < nodes_.size()) (void)nodes_[n]->EndEvent(real, now);
    if (storage_ && !ev.mount.empty()) (void)storage_->EndEvent(real, now);
    for (size_t c : rt.burners) KillChild(c, SIGKILL);
    Log("event {} ({}) ended", ev.id.empty() ? fmt::format("#{}", e) : ev.id, EnumName(ev.kind));
  }

  // Appends a line to the rank's inject file (the rank applies new lines from its next step).
  void Inject(size_t j, int64_t rank, const std::string& line, EventRecord& rec) {
    std::error_code ec;
    const fs::path dir = root_ / "jobs" / s_.jobs[j].id;
    fs::create_directories(dir, ec);
    if (auto ok = WriteRunFile(dir / fmt::format("rank{}.inject", rank), line + "\n", /*append=*/true); !ok) {
      Log("inject: {}", ok.error().message);
      return;
    }
    rec.effects.push_back(fmt::format("{}/rank{}: {}", s_.jobs[j].id, rank, line));
  }

  void TickWorld(double dt_real, double t) {
    const int64_t now = NowNs();
    for (auto& n : nodes_) {
      if (auto ok = n->Tick(now); !ok && !tick_error_logged_) {
        Log("node {}: tick: {}", n->name(), ok.error().message);
        tick_error_logged_ = true;
      }
    }
    if (storage_) {
      if (auto ok = storage_->Tick(now); !ok && !storage_error_logged_) {
        Log("storage: tick: {}", ok.error().message);
        storage_error_logged_ = true;
      }
    }
    // Other tenants' traffic through the fabric (bytes are not scaled; time is compressed).
    for (const auto& tn : tenants_) {
      if (t < tn.start_real_s || (tn.end_real_s >= 0 && t >= tn.end_real_s) || dt_real <= 0) continue;
      const double bytes = s_.tenants[tn.index].traffic_gbps * 1e9 / 8.0 * dt_real * c_;
      const auto share = static_cast<uint64_t>(bytes / static_cast<double>(tn.slots.size()));
      for (uint32_t slot : tn.slots) {
        if (net::NicSlot* nic = net_.nic(slot)) net::Add(&nic->other_tx_bytes, share);
      }
    }
  }

  // ---- children --------------------------------------------------------------------------

  size_t AddChild(pid_t pid, ChildKind kind, size_t owner, size_t sub) {
    children_.push_back(Child{pid, kind, owner, sub, true, 0});
    return children_.size() - 1;
  }

  // Whether `ch` is still ours to signal: not yet reaped by us (running, or a zombie whose pid,
  // and so its process group id, nobody else can have). After our waitpid the pid may be reused
  // (pid_max is small) and kill(-pid) could hit a stranger's group: never signal then.
  static bool Signalable(const Child& ch) {
    if (!ch.alive || ch.pid <= 0) return false;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(ch.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
    return true;  // si_pid 0: running; si_pid == pid: a zombie not yet reaped
  }

  void ReapChildren() {
    for (auto& ch : children_) {
      if (!ch.alive) continue;
      siginfo_t info{};
      // Peek first (WNOWAIT): while it is an unreaped zombie its group id is still ours.
      if (waitid(P_PID, static_cast<id_t>(ch.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
        if (info.si_pid == 0) continue;  // running
        // Whatever the process group still holds (a loader worker left behind) goes with it, as
        // when slurmstepd tears down a step's cgroup.
        kill(-ch.pid, SIGKILL);
        int status = 0;
        if (waitpid(ch.pid, &status, 0) != ch.pid) status = 0xff00;
        ch.status = status;
      } else if (errno == ECHILD) {
        // Someone else reaped it (a library's waitpid(-1)): gone, and its group id no longer ours.
        ch.status = 0xff00;  // exit status 255: unknown
      } else {
        continue;
      }
      ch.alive = false;
      const int status = ch.status;
      if (ch.kind == ChildKind::kServer && ch.owner < record_.servers.size()) {
        ServerRecord& sr = record_.servers[ch.owner];
        sr.state = stopping_ ? "stopped" : "ended";
        sr.ended_ns = NowNs();
        sr.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        dirty_ = true;
        if (!stopping_) Log("server {} exited (status {})", sr.id, *sr.exit_code);
      }
      if (ch.kind == ChildKind::kAgent && world_t0_ != 0 && !stopping_) {
        Log("node {}: WARNING the agent exited during the run (status {})", s_.nodes[ch.owner].name, status);
      }
    }
  }

  void KillChild(size_t c, int sig) {
    if (c < children_.size() && Signalable(children_[c])) kill(-children_[c].pid, sig);
  }

  void StopChildren(bool agents) {
    auto selected = [&](const Child& ch) { return (ch.kind == ChildKind::kAgent) == agents; };
    bool any = false;
    for (auto& ch : children_) {
      if (!selected(ch) || !Signalable(ch)) continue;
      kill(-ch.pid, SIGTERM);
      any = true;
    }
    if (!any) return;
    const int64_t deadline = MonoNs() + SecondsToNs(agents ? o_.agent_grace_s : o_.grace_s);
    while (MonoNs() < deadline) {
      ReapChildren();
      if (std::none_of(children_.begin(), children_.end(),
                       [&](const Child& ch) { return selected(ch) && ch.alive; }))
        break;
      usleep(50'000);
    }
    for (auto& ch : children_) {
      if (!selected(ch) || !ch.alive) continue;
      if (Signalable(ch)) kill(-ch.pid, SIGKILL);
    }
    // Reaps them (each: its group killed while still a zombie, then waitpid).
    for (int i = 0; i < 200; ++i) {
      ReapChildren();
      if (std::none_of(children_.begin(), children_.end(),
                       [&](const Child& ch) { return selected(ch) && ch.alive; }))
        break;
      usleep(10'000);
    }
  }

  void Shutdown() {
    if (shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    if (record_.phase == "running") record_.phase = "stopping";
    if (!root_.empty()) WriteWorld();
    StopChildren(/*agents=*/false);
    for (auto& sr : record_.servers) {
      if (sr.state != "running") continue;
      sr.state = "stopped";
      sr.ended_ns = NowNs();
    }
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (jobs_[j].state != JobRt::State::kRunning) continue;
      ReadPidReports(j);
      record_.jobs[j].state = "stopped";
      record_.jobs[j].ended_ns = NowNs();
    }
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (!jobs_[j].dir.empty()) MergeTruth(jobs_[j].dir, record_.jobs[j]);
    }
    record_.ended_ns = NowNs();
    if (o_.hold_agents_s > 0 && record_.phase != "failed" && !g_stop && o_.agents) HoldAgents();
    StopChildren(/*agents=*/true);
    if (storage_) storage_->Stop();
    storage_.reset();
    nodes_.clear();
    std::error_code ec;
    if (!shm_dir_.empty()) fs::remove_all(shm_dir_, ec);
    if (record_.phase != "failed") record_.phase = "ended";
    if (!root_.empty()) {
      WriteWorld();
      if (o_.clean && created_root_) {
        fs::remove_all(root_, ec);
        Log("run dir removed (--clean)");
      } else if (o_.clean) {
        Log("run dir {} kept: --clean removes only a run dir this run created", root_.string());
      } else {
        Log("world.json: {}", (root_ / "world.json").string());
      }
    }
  }

  // The world has ended (no launcher or burner runs; the Storage's io tenants keep their
  // schedule) and world.json holds the merged truth; the agents and the node files they read
  // stay up so a checker can query them at leisure.
  void HoldAgents() {
    record_.phase = "holding";
    WriteWorld();
    Log("holding the agents for {:.0f} s (world.json phase \"holding\")", o_.hold_agents_s);
    const int64_t until = MonoNs() + SecondsToNs(o_.hold_agents_s);
    while (MonoNs() < until && !g_stop) {
      ReapChildren();
      const int64_t now = NowNs();
      for (auto& n : nodes_) (void)n->Tick(now);
      if (storage_) (void)storage_->Tick(now);
      usleep(kTickNs / 1000);
    }
  }

  void WriteWorld() {
    if (root_.empty()) return;
    if (auto ok = WriteWorldJson(root_ / "world.json", record_); !ok)
      Log("world.json: {}", ok.error().message);
    dirty_ = false;
  }

  RunOptions o_;
  int64_t t0_ = 0;
  int64_t world_t0_ = 0;
  scenario::Scenario unresolved_;
  Resolved s_;
  uint64_t seed_ = 0;
  double c_ = 1;
  double byte_scale_ = 1;
  double duration_real_s_ = 0;
  std::vector<StoryMilestone> milestones_;
  double cap_real_s_ = 0;
  bool extending_ = false;       // past the duration, waiting for the story
  double story_told_at_ = -1;    // world seconds when it was told past the duration
  int64_t training_ranks_ = 0;
  fs::path root_;
  fs::path shm_dir_;
  fs::path train_;
  net::NetStateMapping net_;
  std::vector<NicPlan> nics_;
  std::vector<std::unique_ptr<node::NodeWorld>> nodes_;
  std::unique_ptr<node::Storage> storage_;
  std::vector<Child> children_;
  std::vector<JobRt> jobs_;
  std::vector<EventRt> events_;
  std::vector<size_t> timed_order_;
  size_t next_timed_ = 0;
  std::vector<TenantRt> tenants_;
  WorldRecord record_;
  bool dirty_ = false;
  bool created_root_ = false;
  int64_t last_server_check_ = 0;
  bool shut_down_ = false;
  bool stopping_ = false;
  bool tick_error_logged_ = false;
  bool storage_error_logged_ = false;
};

}  // namespace

void RequestStop() { g_stop = 1; }

int RunWorld(const RunOptions& options) {
  World world(options);
  return world.Run();
}

}  // namespace ithbat::sim::runner
