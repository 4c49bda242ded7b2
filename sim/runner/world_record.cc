#include "runner/world_record.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>

#include <fcntl.h>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace ithbat::sim::runner {
namespace {

using json = nlohmann::json;

json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

std::string WorldToJson(const WorldRecord& w) {
  json j;
  j["format"] = kWorldFormat;
  j["scenario"] = w.scenario;
  j["seed"] = w.seed;
  j["quick"] = w.quick;
  j["magnitude"] = w.magnitude;
  j["time_compression"] = w.time_compression;
  j["byte_scale"] = w.byte_scale;
  j["root"] = w.root;
  j["nccl_shm_dir"] = w.nccl_shm_dir;
  j["phase"] = w.phase;
  j["stop_reason"] = w.stop_reason;
  j["duration_real_s"] = w.duration_real_s;
  j["story"] = {{"cap_real_s", w.story_cap_real_s}, {"milestones", w.story_milestones}, {"untold", w.story_untold}};
  j["started_ns"] = w.started_ns;
  j["ended_ns"] = w.ended_ns;
  j["host_jitter_processes"] = w.host_jitter_processes;
  json nodes = json::array();
  for (const auto& n : w.nodes) {
    json gpus = json::array();
    for (const auto& g : n.gpus) gpus.push_back({{"index", g.index}, {"uuid", g.uuid}});
    json nics = json::array();
    for (const auto& c : n.nics) {
      nics.push_back({{"name", c.name}, {"port", c.port}, {"slot", c.slot}, {"gpus", c.gpus}});
    }
    nodes.push_back(
        {{"name", n.name},
         {"index", n.index},
         {"agent_url", n.agent_url},
         {"agent_pid", n.agent_pid},
         {"agent_data_dir", n.agent_data_dir},
         {"state", n.state},
         {"procfs", n.procfs},
         {"sysfs", n.sysfs},
         {"kmsg", n.kmsg},
         {"gpus", gpus},
         {"nics", nics},
         {"clock",
          {{"skew_ms", n.clock_skew_ms}, {"drift_ppm", n.clock_drift_ppm}, {"faked", n.clock_faked}}}});
  }
  j["nodes"] = nodes;
  json jobs = json::array();
  for (const auto& job : w.jobs) {
    json ranks = json::array();
    for (const auto& r : job.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"local_rank", r.local_rank},
                       {"node", r.node},
                       {"gpu", r.gpu},
                       {"gpu_uuid", r.gpu_uuid},
                       {"pid", r.pid},
                       {"exit_code", Opt(r.exit_code)}});
    }
    json steps = json::array();
    for (const auto& s : job.steps) {
      steps.push_back({{"step", s.step},
                       {"start_ns", s.start_ns},
                       {"end_ns", s.end_ns},
                       {"slowest_rank", s.slowest_rank},
                       {"planned_ns", s.planned_ns},
                       {"ranks", s.ranks}});
    }
    json saves = json::array();
    for (const auto& s : job.saves) {
      saves.push_back({{"step", s.step}, {"start_ns", s.start_ns}, {"end_ns", s.end_ns}, {"bytes", s.bytes}});
    }
    json held = json::array();
    for (const auto& h : job.held) held.push_back({{"reason", h.reason}, {"real_s", h.real_s}});
    jobs.push_back({{"id", job.id},
                    {"launcher", job.launcher},
                    {"scripted_start_ns", job.scripted_start_ns},
                    {"held", held},
                    {"state", job.state},
                    {"slurm_job_id", job.slurm_job_id},
                    {"started_ns", job.started_ns},
                    {"ended_ns", job.ended_ns},
                    {"exit_code", Opt(job.exit_code)},
                    {"steps_done", job.steps_done},
                    {"ranks", ranks},
                    {"steps", steps},
                    {"saves", saves}});
  }
  j["jobs"] = jobs;
  json servers = json::array();
  for (const auto& sv : w.servers) {
    servers.push_back({{"id", sv.id},
                       {"node", sv.node},
                       {"url", sv.url},
                       {"port", sv.port},
                       {"pid", sv.pid},
                       {"gpus", sv.gpus},
                       {"state", sv.state},
                       {"started_ns", sv.started_ns},
                       {"ended_ns", sv.ended_ns},
                       {"exit_code", Opt(sv.exit_code)}});
  }
  j["servers"] = servers;
  json events = json::array();
  for (const auto& e : w.events) {
    events.push_back({{"id", e.id},
                      {"kind", e.kind},
                      {"node", e.node},
                      {"gpu", e.gpu},
                      {"nic", e.nic},
                      {"mount", e.mount},
                      {"job", e.job},
                      {"rank", e.rank},
                      {"started_ns", e.started_ns},
                      {"ended_ns", e.ended_ns},
                      {"fired_step", e.fired_step},
                      {"effects", e.effects}});
  }
  j["events"] = events;
  json mounts = json::array();
  for (const auto& m : w.mounts) mounts.push_back({{"name", m.name}, {"kind", m.kind}, {"nodes", m.nodes}, {"also_at", m.also_at}});
  j["mounts"] = mounts;
  return j.dump(1) + "\n";
}

Status WriteWorldJson(const std::filesystem::path& path, const WorldRecord& world) {
  const std::string text = WorldToJson(world);
  const std::string tmp = path.string() + ".tmp";
  // O_EXCL|O_NOFOLLOW: never write through a link someone planted; a stale temp file from a
  // runner killed mid-write is removed (unlink removes a link, not its target) and made anew.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0) return ErrnoError(ErrorCode::kIo, tmp, errno);
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoError(ErrorCode::kIo, tmp, err);
    }
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError(ErrorCode::kIo, path.string(), errno);
  return Ok();
}

void MergeTruth(const std::filesystem::path& job_dir, JobRecord& job) {
  struct Agg {
    StepRecord rec;
    int64_t best_tokens = -1;
    int64_t best_duration = -1;
  };
  std::map<int64_t, Agg> steps;
  std::map<int64_t, SaveRecord> saves;
  for (const auto& r : job.ranks) {
    std::ifstream in(job_dir / fmt::format("rank{}.truth.jsonl", r.rank));
    if (!in) continue;
    std::string line;
    size_t read = 0;
    while (read < kMaxTruthBytes) {
      // One line, bounded: the bytes past kMaxTruthLineBytes are consumed, not kept.
      line.clear();
      bool too_long = false, any = false;
      std::streambuf* buf = in.rdbuf();
      for (int ch = buf->sbumpc(); ch != std::char_traits<char>::eof(); ch = buf->sbumpc()) {
        any = true;
        ++read;
        if (ch == '\n') break;
        if (line.size() < kMaxTruthLineBytes) {
          line.push_back(static_cast<char>(ch));
        } else {
          too_long = true;
        }
      }
      if (!any) break;
      if (too_long) continue;
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;
      auto num = [&](const char* key) -> std::optional<int64_t> {
        auto it = j.find(key);
        if (it == j.end() || !it->is_number()) return std::nullopt;
        return it->get<int64_t>();
      };
      const auto start = num("start_ns");
      const auto end = num("end_ns");
      if (!start || !end) continue;
      if (auto save = num("save_step")) {
        SaveRecord& s = saves[*save];
        s.step = *save;
        s.start_ns = s.start_ns == 0 ? *start : std::min(s.start_ns, *start);
        s.end_ns = std::max(s.end_ns, *end);
        if (auto bytes = num("bytes"); bytes && *bytes > 0) s.bytes += static_cast<uint64_t>(*bytes);
      } else if (auto step = num("step")) {
        Agg& a = steps[*step];
        a.rec.step = *step;
        a.rec.start_ns = a.rec.start_ns == 0 ? *start : std::min(a.rec.start_ns, *start);
        a.rec.end_ns = std::max(a.rec.end_ns, *end);
        ++a.rec.ranks;
        a.rec.planned_ns = std::max(a.rec.planned_ns, num("compute_ns").value_or(0));
        const int64_t tokens = num("tokens").value_or(0);
        const int64_t duration = *end - *start;
        if (tokens > a.best_tokens || (tokens == a.best_tokens && duration > a.best_duration)) {
          a.best_tokens = tokens;
          a.best_duration = duration;
          a.rec.slowest_rank = r.rank;
        }
      }
    }
  }
  job.steps.clear();
  job.saves.clear();
  int64_t done = 0;
  const int64_t world = static_cast<int64_t>(job.ranks.size());
  for (auto& [n, a] : steps) {
    job.steps.push_back(a.rec);
    if (a.rec.ranks >= world) ++done;  // a step counts when every rank finished it
  }
  for (auto& [n, s] : saves) job.saves.push_back(s);
  job.steps_done = done;
}

}  // namespace ithbat::sim::runner
