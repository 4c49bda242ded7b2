#include "collect/identity/identity_parse.h"

#include <algorithm>
#include <charconv>

#include "core/file_util.h"

namespace ithbat::collect::identity {
namespace {

constexpr std::array<std::string_view, kEnvKeyCount> kEnvNames = {
    "SLURM_JOB_ID",         "SLURM_STEP_ID",        "SLURM_PROCID",
    "SLURM_LOCALID",        "SLURM_NTASKS",         "RANK",
    "LOCAL_RANK",           "WORLD_SIZE",           "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK",       "PMI_SIZE",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ITHBAT_JOBLOG",
};

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view StripSuffix(std::string_view s, std::string_view suffix) {
  if (s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix) {
    s.remove_suffix(suffix.size());
  }
  return s;
}

// A pod UID: 36 chars, hex in 8-4-4-4-12 groups. Accepts the systemd form with '_' for '-'.
std::string NormalizePodUid(std::string_view s) {
  std::string out(s);
  std::replace(out.begin(), out.end(), '_', '-');
  if (out.size() != 36) return {};
  for (size_t i = 0; i < out.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? out[i] != '-' : !IsHex(std::string_view(&out[i], 1))) return {};
  }
  return out;
}

std::string ContainerIdFrom(std::string_view comp) {
  comp = StripSuffix(comp, ".scope");
  for (std::string_view prefix : {"docker-", "cri-containerd-", "crio-"}) {
    if (StartsWith(comp, prefix)) {
      std::string_view id = comp.substr(prefix.size());
      return IsHex(id) && id.size() == 64 ? std::string(id) : std::string();
    }
  }
  return {};
}

void ParseCgroupPath(std::string_view path, CgroupIdentity* out) {
  bool kube = path.find("kubepods") != std::string_view::npos;
  bool after_pod = false;
  std::string_view prev;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view comp = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (comp.empty()) continue;
    if (out->slurm_job.empty() && StartsWith(comp, "job_") && IsDigits(comp.substr(4))) {
      out->slurm_job = std::string(comp.substr(4));
    } else if (out->slurm_step.empty() && StartsWith(comp, "step_") && comp.size() > 5 &&
               StartsWith(prev, "job_") && IsDigits(prev.substr(4))) {
      out->slurm_step = std::string(comp.substr(5));
    }
    if (kube && out->pod_uid.empty()) {
      std::string_view c = StripSuffix(comp, ".slice");
      size_t p = c.rfind("pod");
      if (p != std::string_view::npos && (p == 0 || c[p - 1] == '-')) {
        std::string uid = NormalizePodUid(c.substr(p + 3));
        if (!uid.empty()) {
          out->pod_uid = std::move(uid);
          after_pod = true;
          prev = comp;
          continue;
        }
      }
    }
    if (out->container_id.empty()) {
      std::string id = ContainerIdFrom(comp);
      // cgroupfs layouts name the container by its bare id: /kubepods/<qos>/pod<uid>/<id>,
      // /docker/<id>.
      if (id.empty() && (after_pod || prev == "docker") && IsHex(comp) && comp.size() == 64) {
        id = std::string(comp);
      }
      if (!id.empty()) out->container_id = std::move(id);
    }
    prev = comp;
  }
}

int32_t ParseInt32(std::string_view s) {
  int32_t v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return -1;
  return v;
}

}  // namespace

std::string_view EnvKeyName(EnvKey key) { return kEnvNames[static_cast<size_t>(key)]; }

bool AllowedEnv::empty() const {
  return std::none_of(values.begin(), values.end(), [](const auto& v) { return v.has_value(); });
}

AllowedEnv ParseEnviron(std::string_view environ) {
  AllowedEnv out;
  size_t pos = 0;
  while (pos < environ.size()) {
    size_t end = environ.find('\0', pos);
    if (end == std::string_view::npos) end = environ.size();
    std::string_view entry = environ.substr(pos, end - pos);
    pos = end + 1;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    std::string_view key = entry.substr(0, eq);
    for (size_t i = 0; i < kEnvKeyCount; ++i) {
      if (kEnvNames[i] != key) continue;
      std::string_view value = entry.substr(eq + 1);
      // A duplicated key: the first wins, as glibc's getenv sees it.
      if (value.size() <= kMaxEnvValueBytes && !out.values[i]) out.values[i] = std::string(value);
      break;
    }
  }
  return out;
}

CgroupIdentity ParseCgroup(std::string_view cgroup) {
  CgroupIdentity out;
  LineReader lines(cgroup);
  std::string_view line;
  while (lines.Next(&line)) {
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view path = line.substr(c2 + 1);
    if (path.empty() || path[0] != '/') continue;
    ParseCgroupPath(path, &out);
  }
  return out;
}

Result<ProcStatus> ParseStatus(std::string_view status) {
  ProcStatus out;
  bool have_ppid = false;
  LineReader lines(status);
  std::string_view line;
  while (lines.Next(&line)) {
    FieldReader fields(line);
    std::string_view key;
    if (!fields.Next(&key)) continue;
    if (key == "PPid:") {
      std::string_view v;
      if (!fields.Next(&v)) break;
      auto n = ParseInt64(v);
      if (!n || *n < 0 || *n > INT32_MAX) {
        return MakeErrorF(ErrorCode::kParse, "status: bad PPid {}", QuoteForError(v));
      }
      out.ppid = static_cast<int32_t>(*n);
      have_ppid = true;
    } else if (key == "NSpid:") {
      std::string_view v;
      while (fields.Next(&v) && out.nspid.size() < 64) {
        int32_t n = ParseInt32(v);
        if (n < 0) {
          return MakeErrorF(ErrorCode::kParse, "status: bad NSpid {}", QuoteForError(line));
        }
        out.nspid.push_back(n);
      }
    }
  }
  if (!have_ppid) return MakeError(ErrorCode::kParse, "status: no PPid line");
  return out;
}

Result<uint64_t> ParseStatStartTime(std::string_view stat) {
  size_t close = stat.rfind(')');
  if (close == std::string_view::npos) {
    return MakeErrorF(ErrorCode::kParse, "stat: no ')' in {}", QuoteForError(stat));
  }
  FieldReader fields(stat.substr(close + 1));
  std::string_view f;
  // After ')' the first field is field 3 (state); starttime is field 22.
  for (int field = 3; field <= 22; ++field) {
    if (!fields.Next(&f)) {
      return MakeErrorF(ErrorCode::kParse, "stat: only {} fields in {}", field - 1,
                        QuoteForError(stat));
    }
  }
  return ParseUint64(f);
}

GpuRef ResolveGpu(const std::optional<std::string>& visible_devices, int32_t local_rank) {
  GpuRef ref;
  if (!visible_devices) {
    if (local_rank >= 0) ref.index = local_rank;
    return ref;
  }
  std::vector<std::string_view> entries;
  std::string_view list = *visible_devices;
  size_t pos = 0;
  while (pos <= list.size() && entries.size() < 1024) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view e = list.substr(pos, comma - pos);
    while (!e.empty() && e.front() == ' ') e.remove_prefix(1);
    while (!e.empty() && e.back() == ' ') e.remove_suffix(1);
    if (!e.empty()) entries.push_back(e);
    pos = comma + 1;
  }
  std::string_view chosen;
  if (entries.size() == 1) {
    chosen = entries[0];
  } else if (local_rank >= 0 && static_cast<size_t>(local_rank) < entries.size()) {
    chosen = entries[static_cast<size_t>(local_rank)];
  } else {
    return ref;
  }
  if (IsDigits(chosen)) {
    ref.index = ParseInt32(chosen);
  } else if (StartsWith(chosen, "GPU-") || StartsWith(chosen, "MIG-")) {
    ref.uuid = std::string(chosen.substr(0, 128));
  }
  return ref;
}

Result<SlurmJobInfo> ParseScontrolJob(std::string_view text) {
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) return MakeError(ErrorCode::kParse, "scontrol: empty output");
  SlurmJobInfo out;
  bool have_id = false;
  // Tokens are Key=Value separated by spaces; a value may itself contain spaces (JobName,
  // Command, WorkDir), so a token that does not start with a Key= continues the previous value.
  std::string* current = nullptr;
  std::string ignored;
  std::string num_nodes;
  std::string user;
  FieldReader fields(line);
  std::string_view tok;
  while (fields.Next(&tok)) {
    size_t eq = tok.find('=');
    bool is_key = eq != std::string_view::npos && eq > 0 &&
                  std::all_of(tok.begin(), tok.begin() + static_cast<ptrdiff_t>(eq), [](char c) {
                    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == ':' ||
                           (c >= '0' && c <= '9') || c == '/';
                  });
    if (!is_key) {
      if (current && current->size() < 1024) {
        current->push_back(' ');
        current->append(tok.substr(0, 1024));
      }
      continue;
    }
    std::string_view key = tok.substr(0, eq);
    std::string_view value = tok.substr(eq + 1, 1024);
    if (key == "JobId") {
      current = &out.job_id;
      have_id = true;
    } else if (key == "JobName") {
      current = &out.name;
    } else if (key == "UserId") {
      current = &user;
    } else if (key == "Partition") {
      current = &out.partition;
    } else if (key == "NodeList") {
      current = &out.node_list;
    } else if (key == "NumNodes") {
      current = &num_nodes;
    } else if (key == "JobState") {
      current = &out.state;
    } else {
      current = &ignored;
      ignored.clear();
    }
    current->assign(value);
  }
  if (!have_id) {
    return MakeErrorF(ErrorCode::kParse, "scontrol: no JobId in {}", QuoteForError(line));
  }
  out.user = user.substr(0, user.find('('));
  size_t digits = 0;
  while (digits < num_nodes.size() && num_nodes[digits] >= '0' && num_nodes[digits] <= '9') {
    ++digits;
  }
  if (digits > 0) out.num_nodes = ParseInt32(std::string_view(num_nodes).substr(0, digits));
  if (out.node_list == "(null)") out.node_list.clear();
  return out;
}

}  // namespace ithbat::collect::identity
