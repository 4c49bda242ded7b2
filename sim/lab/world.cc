#include "lab/world.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace ithbat::sim::lab {
namespace {

using nlohmann::json;

constexpr size_t kMaxWorldBytes = 64u << 20;

std::string Str(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}
int64_t Int(const json& o, const char* key, int64_t fallback = -1) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<int64_t>() : fallback;
}
double Num(const json& o, const char* key, double fallback) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}
const json& List(const json& o, const char* key) {
  static const json empty = json::array();
  auto it = o.find(key);
  return it != o.end() && it->is_array() ? *it : empty;
}

template <class T, class Fn>
std::vector<T> Each(const json& list, Fn&& fn) {
  std::vector<T> out;
  for (const auto& x : list) {
    if (x.is_object()) out.push_back(fn(x));
  }
  return out;
}

}  // namespace

int64_t WorldJob::StepAt(TimeNs t) const {
  int64_t at = -1;
  for (const auto& s : steps) {
    if (s.start > t) break;
    at = s.step;
  }
  return at;
}

int64_t WorldJob::StepsBetween(TimeNs from, TimeNs to) const {
  int64_t n = 0;
  for (const auto& s : steps) n += (s.start >= from && s.start < to) ? 1 : 0;
  return n;
}

const WorldJob* World::Job(std::string_view id) const {
  for (const auto& j : jobs) {
    if (j.id == id) return &j;
  }
  return nullptr;
}
const WorldServer* World::Server(std::string_view id) const {
  for (const auto& s : servers) {
    if (s.id == id) return &s;
  }
  return nullptr;
}
const WorldNode* World::Node(std::string_view name) const {
  for (const auto& n : nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}
const WorldEvent* World::Event(std::string_view id) const {
  for (const auto& e : events) {
    if (e.id == id) return &e;
  }
  return nullptr;
}
const WorldMount* World::Mount(std::string_view name) const {
  for (const auto& m : mounts) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Result<World> ParseWorld(std::string_view text) {
  if (text.size() > kMaxWorldBytes) return MakeError(ErrorCode::kInvalidArgument, "world.json is over 64 MiB");
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument, "world.json is not a JSON object");
  }
  World w;
  w.scenario = Str(doc, "scenario");
  if (auto it = doc.find("seed"); it != doc.end() && it->is_number_unsigned()) {
    w.seed = it->get<uint64_t>();
  } else if (it != doc.end() && it->is_number_integer()) {
    w.seed = static_cast<uint64_t>(it->get<int64_t>());
  }
  w.quick = doc.value("quick", false);
  w.magnitude = doc.value("magnitude", 1.0);
  w.time_compression = Num(doc, "time_compression", 1);
  w.byte_scale = Num(doc, "byte_scale", 1);
  w.root = Str(doc, "root");
  w.started = Int(doc, "started_ns", 0);
  w.ended = Int(doc, "ended_ns", 0);
  w.stop_reason = Str(doc, "stop_reason");
  w.duration_real_s = Num(doc, "duration_real_s", 0);
  // The judges replay the world second by second from its start: a world that never started
  // (its set-up failed) or whose clock is not a run's has nothing to judge, and replaying it
  // from 1970 would not end.
  if (w.started <= 0 || w.ended < w.started || w.ended - w.started > kMaxWorldSpanNs) {
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "world.json: the world has no run to judge (started_ns {}, ended_ns {}, stop reason '{}')",
                      w.started, w.ended, w.stop_reason.empty() ? "none" : w.stop_reason);
  }
  if (auto it = doc.find("story"); it != doc.end() && it->is_object()) {
    for (const auto& u : List(*it, "untold")) {
      if (u.is_string()) w.story_untold.push_back(u.get<std::string>());
    }
  }
  w.nodes = Each<WorldNode>(List(doc, "nodes"), [&](const json& n) {
    WorldNode node;
    node.name = Str(n, "name");
    node.agent_url = Str(n, "agent_url");
    node.data_dir = Str(n, "agent_data_dir");
    if (node.data_dir.empty() && !w.root.empty()) node.data_dir = w.root + "/nodes/" + node.name + "/agent";
    node.gpus = Each<WorldGpu>(List(n, "gpus"), [](const json& g) { return WorldGpu{Int(g, "index"), Str(g, "uuid")}; });
    return node;
  });
  w.jobs = Each<WorldJob>(List(doc, "jobs"), [](const json& j) {
    WorldJob job;
    job.id = Str(j, "id");
    job.scripted_start = Int(j, "scripted_start_ns", 0);
    for (const auto& h : List(j, "held")) {
      if (h.is_object()) job.held.emplace_back(Str(h, "reason"), Num(h, "real_s", 0));
    }
    job.started = Int(j, "started_ns", 0);
    job.ended = Int(j, "ended_ns", 0);
    if (j.contains("exit_code") && j["exit_code"].is_number()) job.exit_code = j["exit_code"].get<int64_t>();
    job.ranks = Each<WorldRank>(List(j, "ranks"), [](const json& r) {
      return WorldRank{Int(r, "rank"), Int(r, "local_rank"), Str(r, "node"), Int(r, "gpu"), Str(r, "gpu_uuid"),
                       Int(r, "pid")};
    });
    job.steps = Each<WorldStep>(List(j, "steps"), [](const json& s) {
      return WorldStep{Int(s, "step"), Int(s, "start_ns", 0), Int(s, "end_ns", 0), Int(s, "planned_ns", 0)};
    });
    job.saves = Each<WorldSave>(List(j, "saves"), [](const json& s) {
      return WorldSave{Int(s, "step"), Int(s, "start_ns", 0), Int(s, "end_ns", 0)};
    });
    return job;
  });
  w.servers = Each<WorldServer>(List(doc, "servers"), [](const json& s) {
    return WorldServer{Str(s, "id"), Str(s, "node"), Int(s, "pid"), Int(s, "started_ns", 0), Int(s, "ended_ns", 0)};
  });
  w.events = Each<WorldEvent>(List(doc, "events"), [](const json& e) {
    return WorldEvent{Str(e, "id"),         Str(e, "kind"),  Str(e, "node"),
                      Int(e, "gpu"),        Str(e, "nic"),   Str(e, "mount"),
                      Str(e, "job"),        Int(e, "started_ns", 0), Int(e, "ended_ns", 0),
                      Int(e, "fired_step")};
  });
  w.mounts = Each<WorldMount>(List(doc, "mounts"), [](const json& m) {
    WorldMount mount;
    mount.name = Str(m, "name");
    mount.kind = Str(m, "kind");
    auto it = m.find("nodes");
    if (it != m.end() && it->is_object()) {
      for (const auto& [node, path] : it->items()) {
        if (path.is_string()) mount.node_paths.emplace_back(node, path.get<std::string>());
      }
    }
    for (const auto& a : List(m, "also_at")) {
      if (a.is_string()) mount.also_at.push_back(a.get<std::string>());
    }
    return mount;
  });
  return w;
}

Result<World> ReadWorld(const std::string& path) {
  std::string text;
  auto read = ReadFileBoundedInto(path, kMaxWorldBytes + 1, &text);
  if (!read) return std::unexpected(read.error());
  auto w = ParseWorld(text);
  if (!w) return MakeErrorF(w.error().code, "{}: {}", path, w.error().message);
  return w;
}

}  // namespace ithbat::sim::lab
