#include "collect/slurm/job_record.h"

#include <csignal>
#include <cstring>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace ithbat::collect {
namespace {

using json = nlohmann::json;

// One short line of printable ASCII: what may become a label value or an attribute.
bool PrintableValue(std::string_view v) {
  if (v.size() > kMaxRecordValueBytes) return false;
  for (unsigned char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// Slurm job ids are numbers; an array or het job's own SLURM_JOB_ID is a number too. Letters,
// '_' and '.' are accepted for other schedulers' ids written through the same spool.
bool ValidJobId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string Env(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr) return {};
  std::string_view s(v, strnlen(v, kMaxRecordValueBytes + 1));
  return PrintableValue(s) ? std::string(s) : std::string();
}

std::optional<int64_t> EnvInt(const EnvLookup& getenv, const char* name) {
  const std::string v = Env(getenv, name);
  if (v.empty()) return std::nullopt;
  auto n = ParseInt64(v);
  if (!n) return std::nullopt;
  return *n;
}

const char* SignalName(int32_t sig) {
  // sigabbrev_np is glibc 2.32+; Debian 12 has 2.36.
  const char* name = sig > 0 ? sigabbrev_np(sig) : nullptr;
  return name != nullptr ? name : "?";
}

}  // namespace

std::string_view JobHookEventName(JobHookEvent e) { return e == JobHookEvent::kStart ? "start" : "end"; }

std::string SlurmJobRecord::OutcomeText() const {
  if (signal) return fmt::format("signal {} (SIG{})", *signal, SignalName(*signal));
  if (exit_code) return fmt::format("exit code {}", *exit_code);
  return "unknown";
}

Result<ExitStatus> ParseSlurmExitCode2(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return MakeErrorF(ErrorCode::kParse, "exit code {}: expected EXIT:SIGNAL", QuoteForError(text));
  }
  auto code = ParseInt64(text.substr(0, colon));
  auto sig = ParseInt64(text.substr(colon + 1));
  if (!code || !sig || *code < 0 || *code > 255 || *sig < 0 || *sig > 127) {
    return MakeErrorF(ErrorCode::kParse, "exit code {}: expected EXIT:SIGNAL (0-255:0-127)",
                      QuoteForError(text));
  }
  return ExitStatus{static_cast<int32_t>(*code), static_cast<int32_t>(*sig)};
}

Result<ExitStatus> ParseWaitStatus(std::string_view text) {
  auto raw = ParseInt64(text);
  if (!raw || *raw < 0 || *raw > 0xffff) {
    return MakeErrorF(ErrorCode::kParse, "wait status {}: expected 0-65535", QuoteForError(text));
  }
  const int status = static_cast<int>(*raw);
  // The wait(2) encoding, spelled out instead of WIFEXITED so it does not depend on the host's
  // macros: low 7 bits = terminating signal (0 = exited), next byte = exit code.
  const int sig = status & 0x7f;
  if (sig == 0) return ExitStatus{(status >> 8) & 0xff, 0};
  return ExitStatus{0, sig};
}

Result<SlurmJobRecord> RecordFromEnvironment(JobHookEvent event, const EnvLookup& getenv, TimeNs now) {
  SlurmJobRecord r;
  r.event = event;
  r.time = now;
  const char* job = getenv("SLURM_JOB_ID");
  if (job == nullptr || !ValidJobId(std::string_view(job, strnlen(job, 65)))) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "SLURM_JOB_ID {}: not set or not a job id",
                      job == nullptr ? std::string("(unset)") : QuoteForError(job));
  }
  r.job_id = job;
  r.user = Env(getenv, "SLURM_JOB_USER");
  r.uid = EnvInt(getenv, "SLURM_JOB_UID").value_or(-1);
  r.gid = EnvInt(getenv, "SLURM_JOB_GID").value_or(-1);
  r.account = Env(getenv, "SLURM_JOB_ACCOUNT");
  r.partition = Env(getenv, "SLURM_JOB_PARTITION");
  r.gpus = Env(getenv, "SLURM_JOB_GPUS");
  r.cluster = Env(getenv, "SLURM_CLUSTER_NAME");
  r.node = Env(getenv, "SLURMD_NODENAME");
  if (event == JobHookEvent::kEnd) {
    // EXIT_CODE2 is the readable form; the raw status is the fallback for versions without it.
    std::optional<ExitStatus> st;
    if (auto e2 = ParseSlurmExitCode2(Env(getenv, "SLURM_JOB_EXIT_CODE2")); e2) {
      st = *e2;
    } else if (auto raw = ParseWaitStatus(Env(getenv, "SLURM_JOB_EXIT_CODE")); raw) {
      st = *raw;
    }
    if (st) {
      if (st->signal != 0) {
        r.signal = st->signal;
      } else {
        r.exit_code = st->exit_code;
      }
    }
    if (auto d = ParseWaitStatus(Env(getenv, "SLURM_JOB_DERIVED_EC")); d && d->signal == 0) {
      r.derived_exit_code = d->exit_code;
    }
  }
  return r;
}

std::string RecordToJson(const SlurmJobRecord& r) {
  json j = {{"version", 1},
            {"source", "slurm"},
            {"event", JobHookEventName(r.event)},
            {"time_ns", r.time},
            {"job_id", r.job_id}};
  auto put = [&](const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
  };
  put("user", r.user);
  put("account", r.account);
  put("partition", r.partition);
  put("gpus", r.gpus);
  put("cluster", r.cluster);
  put("node", r.node);
  if (r.uid >= 0) j["uid"] = r.uid;
  if (r.gid >= 0) j["gid"] = r.gid;
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (r.signal) j["signal"] = *r.signal;
  if (r.derived_exit_code) j["derived_exit_code"] = *r.derived_exit_code;
  return j.dump();
}

Result<SlurmJobRecord> ParseRecord(std::string_view text) {
  if (text.size() > kMaxRecordBytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "record of {} bytes: over the {} byte bound",
                      text.size(), kMaxRecordBytes);
  }
  // Depth is bounded by the size bound; the parser does not throw with allow_exceptions=false.
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return MakeErrorF(ErrorCode::kParse, "record {}: not a JSON object", QuoteForError(text));
  auto bad = [&](std::string_view field) {
    return MakeErrorF(ErrorCode::kParse, "record field '{}': missing or malformed", field);
  };
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    return bad("version");
  SlurmJobRecord r;
  const json& ev = j.value("event", json());
  if (!ev.is_string()) return bad("event");
  if (ev == "start") {
    r.event = JobHookEvent::kStart;
  } else if (ev == "end") {
    r.event = JobHookEvent::kEnd;
  } else {
    return bad("event");
  }
  const json& t = j.value("time_ns", json());
  if (!t.is_number_integer() || t.get<int64_t>() <= 0) return bad("time_ns");
  r.time = t.get<int64_t>();
  const json& id = j.value("job_id", json());
  if (!id.is_string() || !ValidJobId(id.get_ref<const std::string&>())) return bad("job_id");
  r.job_id = id.get<std::string>();
  for (auto [key, field] :
       {std::pair{"user", &r.user}, std::pair{"account", &r.account}, std::pair{"partition", &r.partition},
        std::pair{"gpus", &r.gpus}, std::pair{"cluster", &r.cluster}, std::pair{"node", &r.node}}) {
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (!v.is_string() || !PrintableValue(v.get_ref<const std::string&>())) return bad(key);
    *field = v.get<std::string>();
  }
  auto int_field = [&](const char* key, int64_t lo, int64_t hi) -> Result<std::optional<int64_t>> {
    if (!j.contains(key)) return std::optional<int64_t>();
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) return bad(key);
    return std::optional<int64_t>(v.get<int64_t>());
  };
  auto uid = int_field("uid", 0, UINT32_MAX);
  if (!uid) return std::unexpected(uid.error());
  auto gid = int_field("gid", 0, UINT32_MAX);
  if (!gid) return std::unexpected(gid.error());
  auto code = int_field("exit_code", 0, 255);
  if (!code) return std::unexpected(code.error());
  auto sig = int_field("signal", 1, 127);
  if (!sig) return std::unexpected(sig.error());
  auto derived = int_field("derived_exit_code", 0, 255);
  if (!derived) return std::unexpected(derived.error());
  r.uid = uid->value_or(-1);
  r.gid = gid->value_or(-1);
  if (*code) r.exit_code = static_cast<int32_t>(**code);
  if (*sig) r.signal = static_cast<int32_t>(**sig);
  if (*derived) r.derived_exit_code = static_cast<int32_t>(**derived);
  if (r.event == JobHookEvent::kStart && (r.exit_code || r.signal || r.derived_exit_code))
    return bad("exit_code");
  if (r.exit_code && r.signal) return bad("signal");
  return r;
}

std::string RecordFileName(const SlurmJobRecord& r) {
  return fmt::format("{:020d}-{}-{}.json", r.time, r.job_id, JobHookEventName(r.event));
}

}  // namespace ithbat::collect
