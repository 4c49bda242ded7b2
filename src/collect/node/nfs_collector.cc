#include <algorithm>
#include <array>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "collect/node/node_collectors.h"
#include "collect/node/node_parse.h"
#include "core/file_util.h"

namespace ithbat::collect {
namespace {

// NFS desc offsets from nfs_desc_.
enum NfsDesc : size_t {
  kReadBytes,
  kWrittenBytes,
  kServerReadBytes,
  kServerWrittenBytes,
  kOps,
  kTimeouts,
  kRtt,
  kExecute,
  kErrors,
  kNfsDescCount,
};
enum LustreDesc : size_t { kLustreRead, kLustreWritten, kLustreOps };

// The per-op lines exported (a v4 mount lists ~60 ops, most never used by training jobs);
// a fixed list keeps the series count bounded.
constexpr std::array<std::string_view, 14> kNfsOps = {
    "READ", "WRITE", "COMMIT",  "GETATTR",     "SETATTR", "LOOKUP", "ACCESS",
    "OPEN", "CLOSE", "READDIR", "READDIRPLUS", "CREATE",  "REMOVE", "RENAME",
};

constexpr size_t kMaxLustreStatsBytes = 64 * 1024;

}  // namespace

std::unique_ptr<NfsCollector> NfsCollector::Create(NfsOptions options) {
  return std::unique_ptr<NfsCollector>(new NfsCollector(std::move(options)));
}

NfsCollector::NfsCollector(NfsOptions options)
    : NodeCollectorBase(
          "nfs", (options.max_mounts ? options.max_mounts : NfsOptions{}.max_mounts) * (kNfsOps.size() + 1) +
                     (options.max_lustre_fs ? options.max_lustre_fs : NfsOptions{}.max_lustre_fs) * 6),
      options_(std::move(options)) {
  const NfsOptions defaults;
  if (options_.max_file_bytes == 0) options_.max_file_bytes = defaults.max_file_bytes;
  if (options_.max_mounts == 0) options_.max_mounts = defaults.max_mounts;
  if (options_.max_lustre_fs == 0) options_.max_lustre_fs = defaults.max_lustre_fs;
  const auto c = MetricType::kCounter;
  const std::vector<std::string> m = {"mountpoint", "export"};
  const std::vector<std::string> mo = {"mountpoint", "export", "op"};
  nfs_desc_ =
      AddDesc("ithbat_nfs_read_bytes_total",
              "Bytes applications read from the NFS mount, page cache and O_DIRECT (mountstats bytes:)",
              "bytes", c, m);
  AddDesc("ithbat_nfs_written_bytes_total",
          "Bytes applications wrote to the NFS mount, page cache and O_DIRECT (mountstats bytes:)", "bytes",
          c, m);
  AddDesc("ithbat_nfs_server_read_bytes_total", "Bytes read from the NFS server over the wire by READ calls",
          "bytes", c, m);
  AddDesc("ithbat_nfs_server_written_bytes_total",
          "Bytes written to the NFS server over the wire by WRITE calls", "bytes", c, m);
  AddDesc("ithbat_nfs_rpc_operations_total", "NFS RPC operations completed, by operation", "", c, mo);
  AddDesc("ithbat_nfs_rpc_major_timeouts_total", "NFS RPC operations that hit a major timeout, by operation",
          "", c, mo);
  AddDesc("ithbat_nfs_rpc_rtt_seconds_total",
          "Network round-trip time of NFS RPCs summed over operations (divide by operations for latency)",
          "seconds", c, mo);
  AddDesc("ithbat_nfs_rpc_execute_seconds_total",
          "Time from queueing to completion of NFS RPCs summed over operations (includes rtt and queueing)",
          "seconds", c, mo);
  AddDesc("ithbat_nfs_rpc_errors_total", "NFS RPC operations that completed with an error (kernel 5.3+)", "",
          c, mo);
  lustre_desc_ = AddDesc("ithbat_lustre_read_bytes_total",
                         "Bytes read through the Lustre client (llite stats)", "bytes", c, {"fs"});
  AddDesc("ithbat_lustre_written_bytes_total", "Bytes written through the Lustre client (llite stats)",
          "bytes", c, {"fs"});
  AddDesc("ithbat_lustre_operations_total",
          "Lustre client calls by operation (read, write, open, close, fsync; llite stats)", "", c,
          {"fs", "op"});
}

Status NfsCollector::InitImpl(Sink& sink) {
  if (Status s = CheckRoot(options_.procfs, "procfs"); !s) return s;
  sink_ = &sink;
  return Ok();
}

Status NfsCollector::CollectImpl(TimeNs t) {
  BeginTick();
  CollectNfs(t);
  CollectLustre(t);
  EndTick();
  return Ok();
}

void NfsCollector::CollectNfs(TimeNs t) {
  // self is this process's mount namespace; 1 is init's. On the host (/proc) the agent's own
  // namespace holds the node's mounts. Under another root — a container given the host's /proc
  // at /host/proc, with hostPID — self is still the agent's, i.e. the container's mounts, and
  // the node's are init's: 1 first there (self remains the fallback for roots without it).
  const std::filesystem::path self = options_.procfs / "self" / "mountstats";
  const std::filesystem::path init = options_.procfs / "1" / "mountstats";
  const bool own_proc = options_.procfs == std::filesystem::path("/proc");
  const std::array<std::filesystem::path, 2> candidates = {own_proc ? self : init, own_proc ? init : self};
  const std::filesystem::path* path = nullptr;
  Status read = MakeError(ErrorCode::kNotFound, "no mountstats");
  for (const auto& p : candidates) {
    read = ReadFileBoundedInto(p, options_.max_file_bytes, &buffer_);
    if (read || read.error().code != ErrorCode::kNotFound) {
      path = &p;
      break;
    }
  }
  if (path == nullptr) {
    if (!mountstats_missing_) {
      mountstats_missing_ = true;
      SetDegraded(fmt::format("no {} or {}; no NFS series", candidates[0].string(), candidates[1].string()));
    }
    return;
  }
  if (mountstats_missing_) {
    mountstats_missing_ = false;
    SetDegraded("");
  }
  if (!read) {
    ReportError(read.error());
    return;
  }
  auto mounts = ParseMountStats(buffer_, options_.max_mounts);
  if (!mounts) {
    ReportError(Error{mounts.error().code, fmt::format("{}: {}", path->string(), mounts.error().message)});
    return;
  }
  for (const NfsMount& mount : *mounts) {
    key_.assign(mount.mountpoint).push_back('\0');
    key_.append(mount.export_name);
    Entity* e = GetEntity(key_, [&] {
      return LabelPairs{{"mountpoint", mount.mountpoint}, {"export", mount.export_name}};
    });
    if (mount.has_bytes) {
      Emit(e, nfs_desc_ + kReadBytes, t,
           static_cast<double>(mount.normal_read_bytes + mount.direct_read_bytes));
      Emit(e, nfs_desc_ + kWrittenBytes, t,
           static_cast<double>(mount.normal_write_bytes + mount.direct_write_bytes));
      Emit(e, nfs_desc_ + kServerReadBytes, t, static_cast<double>(mount.server_read_bytes));
      Emit(e, nfs_desc_ + kServerWrittenBytes, t, static_cast<double>(mount.server_write_bytes));
    }
    for (const NfsOpStats& op : mount.ops) {
      if (std::find(kNfsOps.begin(), kNfsOps.end(), op.op) == kNfsOps.end()) continue;
      const size_t base = key_.size();
      key_.push_back('\0');
      key_.append(op.op);
      Entity* oe = GetEntity(key_, [&] {
        return LabelPairs{{"mountpoint", mount.mountpoint}, {"export", mount.export_name}, {"op", op.op}};
      });
      key_.resize(base);
      Emit(oe, nfs_desc_ + kOps, t, static_cast<double>(op.ops));
      Emit(oe, nfs_desc_ + kTimeouts, t, static_cast<double>(op.major_timeouts));
      Emit(oe, nfs_desc_ + kRtt, t, static_cast<double>(op.rtt_ms) / 1e3);
      Emit(oe, nfs_desc_ + kExecute, t, static_cast<double>(op.execute_ms) / 1e3);
      if (op.errors) Emit(oe, nfs_desc_ + kErrors, t, static_cast<double>(*op.errors));
    }
  }
}

void NfsCollector::CollectLustre(TimeNs t) {
  const std::filesystem::path dir = options_.procfs / "fs" / "lustre" / "llite";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;  // no Lustre client: nothing to say
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (names.size() == options_.max_lustre_fs) break;
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    ReportError(Error{ErrorCode::kIo, fmt::format("list {}: {}", dir.string(), ec.message())});
    return;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& fs : names) {
    const std::filesystem::path path = dir / fs / "stats";
    if (Status s = ReadFileBoundedInto(path, kMaxLustreStatsBytes, &buffer_); !s) {
      if (s.error().code != ErrorCode::kNotFound) ReportError(s.error());
      continue;
    }
    auto stats = ParseLustreStats(buffer_);
    if (!stats) {
      ReportError(Error{stats.error().code, fmt::format("{}: {}", path.string(), stats.error().message)});
      continue;
    }
    key_.assign("lustre\0", 7).append(fs);
    Entity* e = GetEntity(key_, [&] { return LabelPairs{{"fs", fs}}; });
    if (stats->read_bytes) Emit(e, lustre_desc_ + kLustreRead, t, static_cast<double>(*stats->read_bytes));
    if (stats->write_bytes)
      Emit(e, lustre_desc_ + kLustreWritten, t, static_cast<double>(*stats->write_bytes));
    const std::array<std::pair<std::string_view, const std::optional<uint64_t>*>, 5> ops = {{
        {"read", &stats->reads},
        {"write", &stats->writes},
        {"open", &stats->opens},
        {"close", &stats->closes},
        {"fsync", &stats->fsyncs},
    }};
    for (const auto& [op, value] : ops) {
      if (!*value) continue;
      key_.assign("lustre\0", 7).append(fs).push_back('\0');
      key_.append(op);
      Entity* oe = GetEntity(key_, [&] { return LabelPairs{{"fs", fs}, {"op", std::string(op)}}; });
      Emit(oe, lustre_desc_ + kLustreOps, t, static_cast<double>(**value));
    }
  }
}

}  // namespace ithbat::collect
