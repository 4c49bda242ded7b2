#include "workload/train_spec.h"

#include "workload/spec_json.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ithbat::sim::workload {
namespace {

using nlohmann::json;

using spec_json::CountParamToJson;
using ObjReader = spec_json::Fields;


constexpr double kBigMs = 1e9;
constexpr int64_t kBigSteps = 1'000'000'000;

void ReadSpec(const json& j, TrainSpec& s, std::string* err) {
  ObjReader r(j, "", err);
  r.Str("job_id", s.job_id, 256);
  r.Str("user", s.user, 256);
  r.Str("recipe_fingerprint", s.recipe_fingerprint, 128);
  r.U64("seed", s.seed);
  r.Int("world_size", s.world_size, 1, kMaxWorldSize);
  r.Int("tp", s.tp, 1, kMaxWorldSize);
  r.Int("pp", s.pp, 1, kMaxWorldSize);
  r.Int("dp", s.dp, 1, kMaxWorldSize);
  r.Int("steps", s.steps, 0, kBigSteps);
  r.Int("start_step", s.start_step, 0, kBigSteps);
  if (const json* v = r.Get("log")) {
    ObjReader o(*v, "log", err);
    o.Enum("format", s.log.format);
    o.Int("every_steps", s.log.every_steps, 1, kBigSteps);
    o.Enum("ranks", s.log.ranks);
    o.Bool("buffered", s.log.buffered);
    o.Int("buffer_bytes", s.log.buffer_bytes, 0, 1 << 24);
    o.Check();
  }
  if (const json* v = r.Get("work")) {
    ObjReader o(*v, "work", err);
    o.Num("compute_ms", s.work.compute_ms, 0, kBigMs);
    if (const json* p = o.Get("seq_len")) {
      if (err->empty()) spec_json::ReadCountParam(*p, "work.seq_len", s.work.seq_len, err);
    }
    o.Int("sequences_per_step", s.work.sequences_per_step, 1, 1 << 20);
    o.Bool("packing", s.work.packing);
    o.Num("tensor_share", s.work.tensor_share, 0, 1);
    o.Int("launches_per_step", s.work.launches_per_step, 1, 10'000'000);
    o.Int("host_sync_every_steps", s.work.host_sync_every_steps, 1, kBigSteps);
    o.U64("memory_bytes", s.work.memory_bytes);
    o.Check();
  }
  if (const json* v = r.Get("collectives")) {
    if (!v->is_array() || v->size() > kMaxCollectives) {
      r.Fail("collectives", fmt::format("not an array of at most {}", kMaxCollectives));
    } else {
      for (size_t i = 0; i < v->size(); ++i) {
        TrainCollectiveSpec c;
        ObjReader o((*v)[i], fmt::format("collectives[{}]", i), err);
        o.Enum("op", c.op);
        o.U64("bytes", c.bytes);
        o.Int("per_step", c.per_step, 0, 100000);
        o.Bool("overlap", c.overlap);
        o.Enum("group", c.group);
        o.Check();
        if (c.bytes > (uint64_t{1} << 40)) o.Fail(o.Sub("bytes"), "over 1 TiB");
        s.collectives.push_back(c);
      }
    }
  }
  if (const json* v = r.Get("data_loader")) {
    ObjReader o(*v, "data_loader", err);
    o.Int("workers", s.data_loader.workers, 0, 64);
    o.Num("cpu_ms_per_batch", s.data_loader.cpu_ms_per_batch, 0, kBigMs);
    o.Check();
  }
  if (const json* v = r.Get("checkpoint"); v != nullptr && !v->is_null()) {
    TrainCheckpointSpec c;
    ObjReader o(*v, "checkpoint", err);
    o.Int("every_steps", c.every_steps, 0, kBigSteps);
    o.U64("bytes_per_rank", c.bytes_per_rank);
    o.Str("dir", c.dir, 4096);
    o.Bool("async", c.async);
    o.Check();
    if (c.bytes_per_rank > (uint64_t{1} << 36)) o.Fail("checkpoint.bytes_per_rank", "over 64 GiB");
    if (c.every_steps > 0 && c.dir.empty()) o.Fail("checkpoint.dir", "required when every_steps > 0");
    s.checkpoint = c;
  }
  if (const json* v = r.Get("loss")) {
    ObjReader o(*v, "loss", err);
    o.Enum("model", s.loss.model);
    o.Num("initial", s.loss.initial, 0, 1e6);
    o.Num("final", s.loss.final, 0, 1e6);
    o.Num("noise", s.loss.noise, 0, 10);
    o.Int("drift_start_step", s.loss.drift_start_step, 0, kBigSteps);
    o.Int("explode_step", s.loss.explode_step, 0, kBigSteps);
    o.Int("nan_step", s.loss.nan_step, 0, kBigSteps);
    o.Check();
  }
  if (const json* v = r.Get("lr")) {
    ObjReader o(*v, "lr", err);
    o.Enum("schedule", s.lr.schedule);
    o.Num("peak", s.lr.peak, 0, 100);
    o.Int("warmup_steps", s.lr.warmup_steps, 0, kBigSteps);
    o.Check();
  }
  r.Int("exit_code", s.exit_code, 0, 255);
  r.Num("startup_ms", s.startup_ms, 0, 3.6e6);
  if (const json* v = r.Get("hang"); v != nullptr && !v->is_null()) {
    TrainHangSpec h;
    ObjReader o(*v, "hang", err);
    o.Int("rank", h.rank, 0, kMaxWorldSize - 1);
    o.Int("collective", h.collective, 0, INT64_MAX);
    o.Check();
    s.hang = h;
  }
  if (const json* v = r.Get("host_jitter")) {
    ObjReader o(*v, "host_jitter", err);
    o.Num("burst_ms", s.host_jitter.burst_ms, 0, kBigMs);
    o.Num("bursts_per_min", s.host_jitter.bursts_per_min, 0, 1e6);
    o.Check();
  }
  r.Num("nccl_timeout_ms", s.nccl_timeout_ms, 0, 1e12);
  r.Check();
  if (!err->empty()) return;
  if (s.tp * s.pp * s.dp != s.world_size)
    *err = fmt::format("tp*pp*dp = {}*{}*{} != world_size {}", s.tp, s.pp, s.dp, s.world_size);
  else if (s.hang && s.hang->rank >= s.world_size)
    *err = fmt::format("hang.rank {} outside the world of {}", s.hang->rank, s.world_size);
}

}  // namespace

Result<TrainSpec> ParseTrainSpec(std::string_view text) {
  return spec_json::ParseSpec<TrainSpec>(text, kMaxSpecBytes, "spec",
                                         [](const json& j, TrainSpec& s, std::string* err) { ReadSpec(j, s, err); });
}

Result<TrainSpec> ReadTrainSpecFile(const std::string& path) {
  auto text = spec_json::ReadSpecFile(path, kMaxSpecBytes, "spec");
  if (!text) return std::unexpected(text.error());
  auto s = ParseTrainSpec(*text);
  if (!s) return MakeErrorF(s.error().code, "{}: {}", path, s.error().message);
  return s;
}

std::string TrainSpecToJson(const TrainSpec& s) {
  json j;
  j["job_id"] = s.job_id;
  j["user"] = s.user;
  j["recipe_fingerprint"] = s.recipe_fingerprint;
  j["seed"] = s.seed;
  j["world_size"] = s.world_size;
  j["tp"] = s.tp;
  j["pp"] = s.pp;
  j["dp"] = s.dp;
  j["steps"] = s.steps;
  j["start_step"] = s.start_step;
  j["log"] = {{"format", scenario::EnumName(s.log.format)},
              {"every_steps", s.log.every_steps},
              {"ranks", scenario::EnumName(s.log.ranks)},
              {"buffered", s.log.buffered},
              {"buffer_bytes", s.log.buffer_bytes}};
  j["work"] = {{"compute_ms", s.work.compute_ms},
               {"seq_len", CountParamToJson(s.work.seq_len)},
               {"sequences_per_step", s.work.sequences_per_step},
               {"packing", s.work.packing},
               {"tensor_share", s.work.tensor_share},
               {"launches_per_step", s.work.launches_per_step},
               {"host_sync_every_steps", s.work.host_sync_every_steps},
               {"memory_bytes", s.work.memory_bytes}};
  json cols = json::array();
  for (const auto& c : s.collectives)
    cols.push_back({{"op", scenario::EnumName(c.op)},
                    {"bytes", c.bytes},
                    {"per_step", c.per_step},
                    {"overlap", c.overlap},
                    {"group", scenario::EnumName(c.group)}});
  j["collectives"] = std::move(cols);
  j["data_loader"] = {{"workers", s.data_loader.workers}, {"cpu_ms_per_batch", s.data_loader.cpu_ms_per_batch}};
  if (s.checkpoint)
    j["checkpoint"] = {{"every_steps", s.checkpoint->every_steps},
                       {"bytes_per_rank", s.checkpoint->bytes_per_rank},
                       {"dir", s.checkpoint->dir},
                       {"async", s.checkpoint->async}};
  else
    j["checkpoint"] = nullptr;
  j["loss"] = {{"model", scenario::EnumName(s.loss.model)},
               {"initial", s.loss.initial},
               {"final", s.loss.final},
               {"noise", s.loss.noise},
               {"drift_start_step", s.loss.drift_start_step},
               {"explode_step", s.loss.explode_step},
               {"nan_step", s.loss.nan_step}};
  j["lr"] = {{"schedule", scenario::EnumName(s.lr.schedule)}, {"peak", s.lr.peak}, {"warmup_steps", s.lr.warmup_steps}};
  j["exit_code"] = s.exit_code;
  j["startup_ms"] = s.startup_ms;
  if (s.hang)
    j["hang"] = {{"rank", s.hang->rank}, {"collective", s.hang->collective}};
  else
    j["hang"] = nullptr;
  j["host_jitter"] = {{"burst_ms", s.host_jitter.burst_ms}, {"bursts_per_min", s.host_jitter.bursts_per_min}};
  j["nccl_timeout_ms"] = s.nccl_timeout_ms;
  return j.dump(2);
}

bool operator==(const TrainSpec& a, const TrainSpec& b) { return TrainSpecToJson(a) == TrainSpecToJson(b); }

}  // namespace ithbat::sim::workload
