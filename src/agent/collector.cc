#include "agent/collector.h"

#include <exception>
#include <utility>

#include "agent/logging.h"

namespace ithbat::agent {
namespace {

// One warning line per collector per minute at most: a source that fails on every tick must
// not flood the journal, but the count of what was held back is kept in the next line.
constexpr TimeNs kErrorLogInterval = 60 * kNsPerSec;
// Bounds the text kept in health (it ends up in /health and self-metric logs).
constexpr size_t kMaxErrorTextBytes = 1024;

std::string_view StateName(CollectorState s) {
  switch (s) {
    case CollectorState::kCreated:
      return "created";
    case CollectorState::kInitialized:
      return "initialized";
    case CollectorState::kRunning:
      return "running";
    case CollectorState::kStopped:
      return "stopped";
    case CollectorState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string Bounded(std::string text) {
  if (text.size() > kMaxErrorTextBytes) {
    text.resize(kMaxErrorTextBytes);
    text += "...";
  }
  return text;
}

// The rate limit; called under the collector's lock. True when this line may be logged, with
// the number of lines held back since the last one in *suppressed.
bool TakeLogSlot(TimeNs& last_logged, uint64_t& suppressed_count, uint64_t* suppressed) {
  const TimeNs now = MonotonicNowNs();
  if (last_logged != 0 && now - last_logged < kErrorLogInterval) {
    suppressed_count++;
    return false;
  }
  *suppressed = std::exchange(suppressed_count, 0);
  last_logged = now;
  return true;
}

// Sources wrap libraries that may throw (allocation, a vendor C++ API); an exception must not
// cross into the runtime's threads, so each *Impl call is caught here and becomes an error.
template <class F>
Status Guarded(std::string_view what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return MakeErrorF(ErrorCode::kInternal, "{} threw: {}", what, e.what());
  } catch (...) {
    return MakeErrorF(ErrorCode::kInternal, "{} threw a non-standard exception", what);
  }
}

std::string SuppressedNote(uint64_t suppressed) {
  return suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : std::string();
}

}  // namespace

Status Collector::Init(Sink& sink) {
  {
    std::lock_guard lock(mu_);
    if (health_.state != CollectorState::kCreated) {
      return MakeErrorF(ErrorCode::kInternal, "collector '{}': Init called in state {}", name_,
                        StateName(health_.state));
    }
  }
  // InitImpl runs without the lock: it may call ReportError/SetDegraded.
  Status s = Guarded("init", [&] { return InitImpl(sink); });
  std::lock_guard lock(mu_);
  if (!s) {
    health_.state = CollectorState::kFailed;
    health_.up = false;
    health_.last_error = Bounded("init: " + s.error().ToString());
    return s;
  }
  health_.state = CollectorState::kInitialized;
  return Ok();
}

Status Collector::Start() {
  {
    std::lock_guard lock(mu_);
    if (health_.state != CollectorState::kInitialized) {
      return MakeErrorF(ErrorCode::kInternal, "collector '{}': Start called in state {}", name_,
                        StateName(health_.state));
    }
  }
  Status s = Guarded("start", [&] { return StartImpl(); });
  std::lock_guard lock(mu_);
  if (!s) {
    health_.state = CollectorState::kFailed;
    health_.up = false;
    health_.last_error = Bounded("start: " + s.error().ToString());
    return s;
  }
  health_.state = CollectorState::kRunning;
  return Ok();
}

Status Collector::Collect(TimeNs tick_time) {
  {
    std::lock_guard lock(mu_);
    if (health_.state != CollectorState::kRunning) {
      return MakeErrorF(ErrorCode::kInternal, "collector '{}': Collect called in state {}", name_,
                        StateName(health_.state));
    }
  }
  {
    std::lock_guard lock(mu_);
    partial_error_this_collect_ = false;
  }
  const TimeNs begin = MonotonicNowNs();
  Status s = Guarded("collect", [&] { return CollectImpl(tick_time); });
  const TimeNs duration = MonotonicNowNs() - begin;

  bool log = false;
  uint64_t suppressed = 0;
  {
    std::lock_guard lock(mu_);
    health_.collects++;
    health_.last_duration = duration;
    if (s) {
      health_.up = true;
      health_.last_success = tick_time;
      if (!partial_error_this_collect_) health_.last_error.clear();
      return s;
    }
    health_.errors++;
    health_.up = false;
    health_.last_error = Bounded(s.error().ToString());
    log = TakeLogSlot(last_logged_error_, suppressed_errors_, &suppressed);
  }
  if (log) {
    GetLogger(name_)->warn("collect failed: {}{}", s.error().ToString(), SuppressedNote(suppressed));
  }
  return s;
}

void Collector::Stop() {
  {
    std::lock_guard lock(mu_);
    if (health_.state != CollectorState::kInitialized && health_.state != CollectorState::kRunning) {
      return;  // never initialized, failed, or already stopped: nothing to release
    }
  }
  Status s = Guarded("stop", [&] {
    StopImpl();
    return Ok();
  });
  if (!s) GetLogger(name_)->warn("{}", s.error().ToString());
  std::lock_guard lock(mu_);
  health_.state = CollectorState::kStopped;
  health_.up = false;
}

CollectorHealth Collector::Health() const {
  std::lock_guard lock(mu_);
  return health_;
}

void Collector::MarkTimedOut(std::string_view reason) {
  {
    std::lock_guard lock(mu_);
    health_.timeouts++;
    health_.errors++;
    health_.up = false;
    health_.last_error = Bounded(std::string(reason));
  }
  // Not rate-limited: the watchdog marks one hung Collect once.
  GetLogger(name_)->warn("{}", reason);
}

void Collector::ReportError(const Error& error) {
  bool log = false;
  uint64_t suppressed = 0;
  {
    std::lock_guard lock(mu_);
    health_.errors++;
    // Kept until the end of this Collect (a successful one does not clear it), so health and
    // /healthz say which file or call failed even though the collector stays up.
    health_.last_error = Bounded(error.ToString());
    partial_error_this_collect_ = true;
    log = TakeLogSlot(last_logged_error_, suppressed_errors_, &suppressed);
  }
  if (log) {
    GetLogger(name_)->warn("{}{}", error.ToString(), SuppressedNote(suppressed));
  }
}

void Collector::SetDegraded(std::string reason) {
  reason = Bounded(std::move(reason));
  {
    std::lock_guard lock(mu_);
    if (health_.degraded == reason) return;
    health_.degraded = reason;
  }
  if (reason.empty()) {
    GetLogger(name_)->info("no longer degraded");
  } else {
    GetLogger(name_)->warn("degraded: {}", reason);
  }
}

}  // namespace ithbat::agent
