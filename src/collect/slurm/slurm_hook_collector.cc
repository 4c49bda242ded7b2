#include "collect/slurm/slurm_hook_collector.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/slurm/spool.h"
#include "core/file_util.h"

namespace ithbat::collect {
namespace {

enum DescIndex : size_t { kStarts, kEnds, kRejected, kRunning };

}  // namespace

std::unique_ptr<SlurmHookCollector> SlurmHookCollector::Create(SlurmHookOptions options) {
  return std::unique_ptr<SlurmHookCollector>(new SlurmHookCollector(std::move(options)));
}

SlurmHookCollector::SlurmHookCollector(SlurmHookOptions options)
    : agent::Collector("slurm"), options_(std::move(options)) {
  descs_ = {
      MetricDesc{"ithbat_slurm_job_starts_total",
                 "Jobs Slurm's prolog reported starting on this node",
                 "",
                 MetricType::kCounter,
                 {}},
      MetricDesc{
          "ithbat_slurm_job_ends_total",
          "Jobs Slurm's epilog reported ending on this node, by outcome: completed (exit code 0), failed "
          "(another exit code) or signaled (ended by a signal)",
          "",
          MetricType::kCounter,
          {"outcome"}},
      MetricDesc{
          "ithbat_slurm_hook_records_rejected_total",
          "Spool records of the Slurm hooks that were malformed, oversized or not regular files, removed "
          "unread",
          "",
          MetricType::kCounter,
          {}},
      MetricDesc{"ithbat_slurm_jobs_running",
                 "Jobs started on this node by Slurm's prolog whose epilog has not run",
                 "",
                 MetricType::kGauge,
                 {}},
  };
}

std::vector<MetricDesc> SlurmHookCollector::Describe() const { return descs_; }

Status SlurmHookCollector::InitImpl(Sink& sink) {
  sink_ = &sink;
  auto reg = [&](Counter& c, const MetricDesc& d,
                 std::initializer_list<std::pair<std::string_view, std::string_view>> l) {
    auto labels = LabelSet::From(l);
    if (!labels) return Status(std::unexpected(labels.error()));
    auto ref = sink.RegisterSeries(d, *labels);
    if (!ref) return Status(std::unexpected(ref.error()));
    c.ref = *ref;
    return Ok();
  };
  if (auto s = reg(starts_, descs_[kStarts], {}); !s) return s;
  if (auto s = reg(ends_completed_, descs_[kEnds], {{"outcome", "completed"}}); !s) return s;
  if (auto s = reg(ends_failed_, descs_[kEnds], {{"outcome", "failed"}}); !s) return s;
  if (auto s = reg(ends_signaled_, descs_[kEnds], {{"outcome", "signaled"}}); !s) return s;
  if (auto s = reg(rejected_, descs_[kRejected], {}); !s) return s;
  auto running = sink.RegisterSeries(descs_[kRunning], LabelSet());
  if (!running) return std::unexpected(running.error());
  running_ref_ = *running;
  return Ok();
}

Result<SlurmJobRecord> SlurmHookCollector::ReadRecord(int dirfd, const std::string& name) {
  // O_NOFOLLOW and O_NONBLOCK: a symlink or a FIFO planted in the spool is neither followed nor
  // waited on.
  const int fd = openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError(ErrorCode::kIo, fmt::format("open {}", name), errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return MakeErrorF(ErrorCode::kPermission, "{}: not a regular file", name);
  }
  if (static_cast<size_t>(st.st_size) > kMaxRecordBytes) {
    close(fd);
    return MakeErrorF(ErrorCode::kResourceExhausted, "{}: {} bytes, over the {} byte bound", name, st.st_size,
                      kMaxRecordBytes);
  }
  std::string buf(kMaxRecordBytes + 1, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = read(fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  buf.resize(got);
  auto r = ParseRecord(buf);
  if (!r) return MakeErrorF(r.error().code, "{}: {}", name, r.error().message);
  return r;
}

void SlurmHookCollector::Handle(const SlurmJobRecord& r) {
  Event e;
  e.time = r.time;
  e.kind = r.event == JobHookEvent::kStart ? EventKind::kJobStart : EventKind::kJobEnd;
  // The node is left to the store (the agent's --node): Slurm's NodeName for the same host may
  // differ, and the hub joins a node's events and series by the agent's name. Slurm's is kept
  // as an attribute.
  e.identity.cluster = r.cluster;
  e.identity.job = r.job_id;
  e.source = "slurm";
  e.name = "slurm";
  auto attr = [&](const char* k, const std::string& v) {
    if (!v.empty()) e.attrs.emplace_back(k, v);
  };
  attr("user", r.user);
  if (r.uid >= 0) attr("uid", std::to_string(r.uid));
  if (r.gid >= 0) attr("gid", std::to_string(r.gid));
  attr("account", r.account);
  attr("partition", r.partition);
  attr("gpus", r.gpus);
  attr("cluster", r.cluster);
  attr("slurm_node", r.node);
  if (r.event == JobHookEvent::kStart) {
    starts_.value++;
    e.text = fmt::format("Slurm job {} started{}", r.job_id, r.user.empty() ? "" : " for user " + r.user);
    if (std::find(running_.begin(), running_.end(), r.job_id) == running_.end()) {
      running_.push_back(r.job_id);
      if (running_.size() > options_.max_running_jobs) running_.pop_front();
    }
  } else {
    if (r.exit_code) attr("exit_code", std::to_string(*r.exit_code));
    if (r.signal) attr("signal", std::to_string(*r.signal));
    if (r.derived_exit_code) attr("derived_exit_code", std::to_string(*r.derived_exit_code));
    // The value a shell would report: the exit code, or 128 + the signal.
    if (r.signal) {
      e.value = 128 + *r.signal;
      ends_signaled_.value++;
    } else if (r.exit_code) {
      e.value = *r.exit_code;
      (*r.exit_code == 0 ? ends_completed_ : ends_failed_).value++;
    }
    e.text = fmt::format("Slurm job {} ended: {}", r.job_id, r.OutcomeText());
    std::erase(running_, r.job_id);
  }
  if (auto s = sink_->AppendEvent(std::move(e)); !s) ReportError(s.error());
}

Status SlurmHookCollector::CollectImpl(TimeNs tick_time) {
  const auto& dir = options_.spool_dir;
  Status trusted = CheckSpoolDirectory(dir);
  if (!trusted && trusted.error().code != ErrorCode::kNotFound) {
    SetDegraded(trusted.error().message);
  } else {
    SetDegraded("");
  }
  if (trusted) {
    const int dirfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) return ErrnoError(ErrorCode::kIo, fmt::format("open {}", dir.string()), errno);
    std::vector<std::string> names;
    if (const int fd = dup(dirfd); fd >= 0) {
      if (DIR* d = fdopendir(fd)) {
        size_t listed = 0;
        while (const dirent* ent = readdir(d)) {
          if (++listed > options_.max_entries_per_collect) break;
          const std::string_view n(ent->d_name);
          // Temporaries (".tmp-…") are a hook still writing; everything else that is not a
          // record is left alone.
          if (n.size() > 5 && n.front() != '.' && n.ends_with(".json")) names.emplace_back(n);
        }
        closedir(d);
      } else {
        close(fd);
      }
    }
    std::sort(names.begin(), names.end());  // zero-padded times first: time order
    if (names.size() > options_.max_records_per_collect) names.resize(options_.max_records_per_collect);
    for (const auto& name : names) {
      // Without removal, a record is read once per collector all the same.
      if (!options_.remove_read && !kept_.insert(name).second) continue;
      auto r = ReadRecord(dirfd, name);
      if (r) {
        ++records_read_;
        Handle(*r);
      } else {
        ++records_rejected_;
        rejected_.value++;
        ReportError(
            Error{r.error().code, fmt::format("spool {}: {} (removed)", dir.string(), r.error().message)});
      }
      if (!options_.remove_read) continue;
      if (unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) {
        ReportError(Error{ErrorCode::kIo, fmt::format("spool {}: cannot remove {}: {}", dir.string(), name,
                                                      std::strerror(errno))});
      }
    }
    close(dirfd);
  }
  for (Counter* c : {&starts_, &ends_completed_, &ends_failed_, &ends_signaled_, &rejected_}) {
    if (c->ref) {
      if (auto s = sink_->Append(*c->ref, tick_time, static_cast<double>(c->value)); !s)
        ReportError(s.error());
    }
  }
  if (running_ref_) {
    if (auto s = sink_->Append(*running_ref_, tick_time, static_cast<double>(running_.size())); !s) {
      ReportError(s.error());
    }
  }
  return Ok();
}

}  // namespace ithbat::collect
