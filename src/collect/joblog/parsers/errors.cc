// The error classes of parser.h, from any process whatever its framework. One pass of an
// anchor filter decides which (if any) class checks run; each class gives at most one event per
// line. Per-stream state is O(1): whether a Python traceback is open (to name its exception)
// and the rank/root-cause lines of a torchrun ChildFailedError block.
#include <array>
#include <cmath>
#include <optional>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"
#include "collect/joblog/parsers/signals_scan.h"

namespace ithbat::collect::joblog {
namespace {

using signals::AddAttr;
using signals::Contains;
using signals::Find;
using signals::IsDigit;
using signals::SkipSpaces;

// Anchors are >= 8 bytes so the filter probes every 5th byte only; "loss" (4 bytes) is found
// separately with a vectorised pair search.
enum Anchor : uint32_t {
  kCudaError = 1u << 0,
  kNcclErrorLower = 1u << 1,
  kNcclErrorUpper = 1u << 2,
  kNcclWarn = 1u << 3,
  kNcclCode = (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 8),
  kDistBackend = 1u << 9,
  kUncorrectable = 1u << 10,
  kCudaErrorEnum = (1u << 11) | (1u << 12),
  kTraceback = 1u << 13,
  kExitcode = 1u << 14,
  kClosingSignal = 1u << 15,
  kOutOfMemory = 1u << 16,
  kOutOfMemoryType = 1u << 17,
  kHeartbeat = 1u << 18,
  kWatchdogStuck = 1u << 19,
  kWatchdogCaught = 1u << 20,
  kLocalRank = 1u << 21,
  kRootCause = 1u << 22,
};
constexpr signals::AnchorFilter kFilter{
    "CUDA error", "NCCL error", "NCCL Error", "NCCL WARN", "ncclUnhandled", "ncclSystemErr", "ncclInternalErr",
    "ncclRemoteErr", "ncclInvalid", "DistBackendError", "uncorrectable", "cudaErrorECC", "cudaErrorNvlink",
    "Traceback (most recent call last)", "exitcode", "closing signal", "out of memory", "OutOfMemory",
    "Heartbeat monitor timed out", "watchdog got stuck", "Watchdog caught collective operation timeout",
    "local_rank", "Root Cause (first observed failure)"};

// "loss", "Loss", "LOSS" (any case mix of l/L + os/OS + s/S) at or after `from`.
size_t FindLoss(std::string_view t, size_t from) {
  for (size_t p = from + 1;; ++p) {
    p = signals::FindEitherPair(t, p, 'o', 's', 'O', 'S');
    if (p == std::string_view::npos) return p;
    if (p >= 1 && p + 2 < t.size() && (t[p - 1] == 'l' || t[p - 1] == 'L') && (t[p + 2] == 's' || t[p + 2] == 'S'))
      return p - 1;
  }
}

constexpr LineFacts::Mask kOsMask = LineFacts::MaskOf("os");
constexpr LineFacts::Mask kOsUpperMask = LineFacts::MaskOf("OS");

// A traceback's exception line comes after its frames; past this many lines we stop waiting
// (deep stacks are cut by Python's "[Previous line repeated N more times]").
constexpr int kTracebackWindow = 512;

bool EndsWith(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// "RuntimeError: ...", "torch.OutOfMemoryError: ...", "KeyboardInterrupt" at the start of a
// (prefix-stripped) line → the exception's qualified name.
std::string_view ExceptionName(std::string_view s) {
  if (s.empty() || !(signals::IsAlpha(s[0]) || s[0] == '_')) return {};
  size_t i = 0;
  while (i < s.size() && i < 160 && (signals::IsWordChar(s[i]) || s[i] == '.')) ++i;
  const std::string_view name = s.substr(0, i);
  if (i < s.size() && s[i] != ':') return {};
  if (name.empty() || name.back() == '.') return {};
  const size_t dot = name.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  for (std::string_view suffix : {"Error", "Exception", "Interrupt", "Exit", "Iteration", "Failure", "Warning", "Timeout"}) {
    if (EndsWith(last, suffix) && last.size() > 0 && last[0] >= 'A' && last[0] <= 'Z') return name;
  }
  return {};
}

// "[Rank 7]" (watchdog messages) or "[PG 0 Rank 144]" → 7 / 144.
int32_t BracketedRank(std::string_view t) {
  size_t p = Find(t, "[Rank ");
  if (p == std::string_view::npos) {
    p = Find(t, " Rank ");
    if (p == std::string_view::npos || Find(t.substr(0, p), "[PG ") == std::string_view::npos) return -1;
  }
  size_t used = 0;
  auto n = signals::LeadingInt(t.substr(p + 6), &used);
  if (!n || *n < 0 || *n > 1'000'000 || p + 6 + used >= t.size() || t[p + 6 + used] != ']') return -1;
  return static_cast<int32_t>(*n);
}

class ErrorParser final : public FormatParser {
 public:
  std::string_view name() const override { return "errors"; }

  bool Parse(const LineView& line, std::vector<ParsedEvent>& out) override {
    const std::string_view t = line.text;
    const uint32_t hits = kFilter.Scan(t);
    // "loss" in any case mix holds "os" or "OS": the facts, when given, often rule both out.
    const size_t loss =
        line.facts == nullptr || line.facts->MayContain(kOsMask) || line.facts->MayContain(kOsUpperMask)
            ? FindLoss(t, 0)
            : std::string_view::npos;
    if (hits == 0 && loss == std::string_view::npos && traceback_age_ < 0) return false;
    const size_t before = out.size();
    // The rank prefix is looked up only for lines that can give an event (NanLoss looks it up
    // itself when it fires: most lines with "loss" in them are healthy; so are most lines while
    // a traceback is open).
    const int32_t rank = hits != 0 ? signals::LinePrefixRank(t) : -1;

    if (hits & kTraceback) {
      out.push_back(signals::ErrorEvent(kErrorPythonTraceback, t, rank));
      traceback_age_ = 0;
    } else if (traceback_age_ >= 0) {
      if (++traceback_age_ > kTracebackWindow) {
        traceback_age_ = -1;
      } else if (auto exc = ExceptionName(signals::StripLauncherPrefixes(t)); !exc.empty()) {
        ParsedEvent e = signals::ErrorEvent(kErrorPythonTraceback, t, hits != 0 ? rank : signals::LinePrefixRank(t));
        AddAttr(e, "exception", exc);
        out.push_back(std::move(e));
        traceback_age_ = -1;
      }
    }
    if (hits & (kOutOfMemory | kOutOfMemoryType)) CudaOom(t, rank, out);
    if (hits & (kCudaError | kUncorrectable | kCudaErrorEnum)) CudaSticky(t, rank, out);
    if (hits & (kNcclErrorLower | kNcclErrorUpper | kNcclCode | kDistBackend)) NcclError(t, rank, out);
    if (hits & kWatchdogCaught) NcclTimeout(t, rank, out);
    if (hits & (kHeartbeat | kWatchdogStuck)) WatchdogStuck(t, rank, out);
    if (hits & kNcclWarn) NcclWarn(t, rank, out);
    if (hits & (kExitcode | kClosingSignal | kLocalRank | kRootCause)) Elastic(t, hits, rank, out);
    if (loss != std::string_view::npos) NanLoss(t, loss, out);
    return out.size() != before;
  }

 private:
  // ---- CUDA OOM -------------------------------------------------------------------------
  // torch ≥ 2.1: "Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB of which
  //   12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use.
  //   Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by
  //   PyTorch but unallocated." (2.1 spells "capacty")
  // torch ≤ 2.0: "Tried to allocate 10.73 GiB (GPU 0; 8.00 GiB total capacity; 17.20 GiB already
  //   allocated; 0 bytes free; 19.15 GiB reserved in total by PyTorch)" (1.0: "4.68 MiB cached")
  static void CudaOom(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    if (!Contains(t, "CUDA out of memory") && !Contains(t, "OutOfMemoryError") &&
        !Contains(t, "CUDA error: out of memory"))
      return;
    ParsedEvent e = signals::ErrorEvent(kErrorCudaOom, t, rank);
    auto size_after = [&](std::string_view key) -> std::optional<int64_t> {
      auto rest = signals::After(t, key);
      if (!rest) return std::nullopt;
      return signals::ParseSizePrefix(SkipSpaces(*rest));
    };
    if (auto v = size_after("Tried to allocate")) AddAttr(e, "tried_bytes", static_cast<double>(*v));
    if (auto g = signals::DigitsAfter(t, "GPU "); !g.empty()) AddAttr(e, "gpu", g);
    std::optional<int64_t> capacity = size_after("total capacity of");
    if (!capacity) capacity = size_after("total capacty of");
    std::optional<int64_t> free_bytes = size_after("of which");
    std::optional<int64_t> process = size_after("this process has");
    std::optional<int64_t> allocated = size_after("Of the allocated memory");
    std::optional<int64_t> unallocated = size_after("PyTorch, and");
    std::optional<int64_t> reserved;
    if (allocated && unallocated) reserved = *allocated + *unallocated;
    // The parenthesised form: "; "-separated "<size> <what>" items.
    if (size_t open = Find(t, "(GPU "); open != std::string_view::npos) {
      std::string_view rest = t.substr(open + 1);
      rest = rest.substr(0, rest.find(')'));
      for (int guard = 0; guard < 8 && !rest.empty(); ++guard) {
        const size_t semi = rest.find(';');
        std::string_view item = SkipSpaces(rest.substr(0, semi));
        rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
        size_t used = 0;
        auto bytes = signals::ParseSizePrefix(item, &used);
        if (!bytes) continue;
        std::string_view what = SkipSpaces(item.substr(used));
        if (what.starts_with("total capacity")) capacity = bytes;
        else if (what.starts_with("already allocated")) allocated = bytes;
        else if (what.starts_with("free")) free_bytes = bytes;
        else if (what.starts_with("reserved") || what.starts_with("cached")) reserved = bytes;
      }
    }
    if (capacity) AddAttr(e, "capacity_bytes", static_cast<double>(*capacity));
    if (free_bytes) AddAttr(e, "free_bytes", static_cast<double>(*free_bytes));
    if (process) AddAttr(e, "process_bytes", static_cast<double>(*process));
    if (allocated) AddAttr(e, "allocated_bytes", static_cast<double>(*allocated));
    if (reserved) AddAttr(e, "reserved_bytes", static_cast<double>(*reserved));
    if (unallocated) AddAttr(e, "reserved_unallocated_bytes", static_cast<double>(*unallocated));
    out.push_back(std::move(e));
  }

  // ---- sticky CUDA errors (the application's side of an Xid) ------------------------------
  static void CudaSticky(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    std::string_view cls;
    if (Contains(t, "uncorrectable ECC error") || Contains(t, "cudaErrorECCUncorrectable")) {
      cls = kErrorEccUncorrectable;
    } else if (Contains(t, "uncorrectable NVLink error") || Contains(t, "cudaErrorNvlinkUncorrectable")) {
      cls = kErrorNvlinkUncorrectable;
    }
    const auto msg = signals::After(t, "CUDA error: ");
    if (cls.empty()) {
      if (!msg || msg->starts_with("out of memory")) return;  // OOM is its own class
      cls = kErrorCudaError;
    }
    ParsedEvent e = signals::ErrorEvent(cls, t, rank);
    if (msg) AddAttr(e, "message", signals::CutText(signals::TrimRight(*msg), 160));
    out.push_back(std::move(e));
  }

  // ---- NCCL errors surfaced as exceptions ----------------------------------------------
  //   "torch.distributed.DistBackendError: NCCL error in: ../NCCLUtils.hpp:275, unhandled cuda error (...), NCCL version 2.20.5"
  //   "RuntimeError: NCCL error in: /pytorch/.../ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8"
  //   "ncclUnhandledCudaError: Call to CUDA function failed."
  static std::string_view CodeOfReason(std::string_view reason) {
    if (reason.starts_with("unhandled cuda error")) return "ncclUnhandledCudaError";
    if (reason.starts_with("unhandled system error")) return "ncclSystemError";
    if (reason.starts_with("internal error")) return "ncclInternalError";
    if (reason.starts_with("invalid argument")) return "ncclInvalidArgument";
    if (reason.starts_with("invalid usage")) return "ncclInvalidUsage";
    if (reason.starts_with("remote process exited") || reason.starts_with("remote error")) return "ncclRemoteError";
    return {};
  }
  static void NcclError(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    std::string_view code;
    // "ncclXxxError" (lowercase "nccl" then an upper-case letter; "ProcessGroupNCCL" is not it).
    for (size_t p = Find(t, "nccl"); p != std::string_view::npos; p = Find(t, "nccl", p + 4)) {
      size_t i = p + 4;
      if (i >= t.size() || !(t[i] >= 'A' && t[i] <= 'Z')) continue;
      while (i < t.size() && i - p < 40 && signals::IsAlpha(t[i])) ++i;
      const std::string_view word = t.substr(p, i - p);
      if (word.ends_with("Error") && word != "ncclSuccessError") {
        code = word;
        break;
      }
    }
    std::string_view location, reason, version;
    auto in = signals::After(t, "NCCL error in: ");
    if (in) {
      const size_t comma = in->find(", ");
      location = in->substr(0, std::min<size_t>(comma, 200));
      if (comma != std::string_view::npos) {
        reason = in->substr(comma + 2);
        reason = reason.substr(0, std::min(reason.find(','), reason.find(" (")));
        reason = signals::TrimRight(reason.substr(0, 120));
      }
    } else if (auto e = signals::After(t, "NCCL error: ")) {
      reason = signals::TrimRight(e->substr(0, std::min<size_t>(e->find(','), 120)));
    } else if (auto e2 = signals::After(t, "NCCL Error ")) {  // torch 1.x: "NCCL Error 2: unhandled system error"
      const size_t colon = e2->find(": ");
      if (colon != std::string_view::npos && colon < 4) reason = signals::TrimRight(e2->substr(colon + 2, 120));
    }
    const bool dist_backend = Contains(t, "DistBackendError");
    if (code.empty() && !in && reason.empty() && !dist_backend) return;
    if (code.empty()) code = CodeOfReason(reason);
    if (auto v = signals::After(t, "NCCL version ")) version = signals::NumberToken(*v);
    ParsedEvent e = signals::ErrorEvent(kErrorNcclError, t, rank);
    if (!code.empty()) AddAttr(e, "code", code);
    if (!reason.empty()) AddAttr(e, "reason", reason);
    if (!location.empty()) AddAttr(e, "location", location);
    if (!version.empty()) AddAttr(e, "nccl_version", version);
    if (dist_backend) AddAttr(e, "exception", "DistBackendError");
    out.push_back(std::move(e));
  }

  // ---- ProcessGroupNCCL watchdog ---------------------------------------------------------
  // "[rank0]:[E1206 ...ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation
  //  timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376,
  //  NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds before timing out."
  // (torch 1.x: no NumelIn/NumelOut; no "[rankN]:" prefix)
  static void NcclTimeout(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    const size_t at = Find(t, "Watchdog caught collective operation timeout");
    const std::string_view msg = t.substr(at);
    if (rank < 0) rank = BracketedRank(t);
    ParsedEvent e = signals::ErrorEvent(kErrorNcclTimeout, t, rank);
    // Every value of the message is followed by more of it (", ", ")", " milliseconds"): one that
    // touches the end of the line was cut there ("SeqNum=961" of 96120, "OpType=ALLRED") and is
    // dropped, not read as a smaller number or another operation.
    auto whole = [&](std::string_view v) {
      return !v.empty() && v.data() + v.size() < msg.data() + msg.size();
    };
    auto digits = [&](std::string_view key, std::string_view attr) {
      if (auto v = signals::DigitsAfter(msg, key); whole(v)) AddAttr(e, attr, v);
    };
    digits("SeqNum=", "seq");
    if (auto op = signals::After(msg, "OpType=")) {
      size_t i = 0;
      while (i < op->size() && i < 64 && (signals::IsWordChar((*op)[i]))) ++i;
      if (whole(op->substr(0, i))) AddAttr(e, "op_type", op->substr(0, i));
    }
    digits("NumelIn=", "numel_in");
    digits("NumelOut=", "numel_out");
    digits("Timeout(ms)=", "timeout_ms");
    digits("ran for ", "ran_ms");
    out.push_back(std::move(e));
  }

  // "[rank144]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 144] Heartbeat monitor timed out! ...
  //  workMetaList_.size()=1" / "[F ...] ProcessGroupNCCL's watchdog got stuck for 600 seconds ..."
  static void WatchdogStuck(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    if (rank < 0) rank = BracketedRank(t);
    ParsedEvent e = signals::ErrorEvent(kErrorNcclWatchdogStuck, t, rank);
    if (auto v = signals::DigitsAfter(t, "got stuck for "); !v.empty()) AddAttr(e, "stuck_seconds", v);
    std::string_view pending = signals::DigitsAfter(t, "workMetaList_.size()=");
    if (pending.empty()) pending = signals::DigitsAfter(t, "workMetaList_.size() =");
    if (!pending.empty()) AddAttr(e, "pending_work", pending);
    out.push_back(std::move(e));
  }

  // ---- "host:pid:tid [cudaDev] file.cc:line NCCL WARN message" -----------------------------
  // The names of libibverbs' enum ibv_wc_status (verbs.h), by value: what NCCL prints as
  // "status=N" (net_ib / ib_plugin) or, before 2.19, "with error N".
  static std::string_view IbvStatusName(std::string_view digits) {
    static constexpr std::array<std::string_view, 22> kNames = {
        "IBV_WC_SUCCESS",           "IBV_WC_LOC_LEN_ERR",
        "IBV_WC_LOC_QP_OP_ERR",     "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR",      "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",       "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR",    "IBV_WC_REM_INV_REQ_ERR",
        "IBV_WC_REM_ACCESS_ERR",    "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",     "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR",  "IBV_WC_REM_INV_RD_REQ_ERR",
        "IBV_WC_REM_ABORT_ERR",     "IBV_WC_INV_EECN_ERR",
        "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR",  "IBV_WC_GENERAL_ERR"};
    if (digits.empty() || digits.size() > 2) return {};
    size_t v = 0;
    for (char c : digits) v = v * 10 + static_cast<size_t>(c - '0');
    return v < kNames.size() ? kNames[v] : std::string_view{};
  }

  struct NetFailureKind {
    std::string_view transport;  // "ib" or "socket"
    // What the failure points at, for the engine (docs/joblog-signals.md):
    //  link_or_peer — the other side never answered: the transport's retries ran out
    //    (RETRY_EXC 12, RNR_RETRY_EXC 13, RESP_TIMEOUT 20). A dead link or switch port does
    //    this, and so does a peer process or host that died: port counters tell them apart.
    //  peer — the other side closed the connection or refused it (a socket reset, EOF, broken
    //    pipe): its process most often died first; its own output says why.
    //  local — the request itself was refused on this host (LOC_PROT 4, LOC_ACCESS 8, length
    //    and QP errors): memory registration, GPUDirect RDMA (nvidia-peermem / dma-buf) or a
    //    software fault, not the fabric.
    //  remote — the remote side refused the request (REM_ACCESS 10, REM_INV_REQ 9, REM_OP 11):
    //    its registration or QP state.
    //  consequence — WR_FLUSH 5: the queue pair was already in error and drained what it held;
    //    the first error is elsewhere.
    //  unknown — anything else.
    std::string_view suspect;
  };
  // The work-completion status of an IB completion error: "status=N" (NCCL ≥ 2.19) or
  // "with error N" (before).
  static std::string_view IbStatus(std::string_view msg) {
    std::string_view status = signals::DigitsAfter(msg, "status=");
    return status.empty() ? signals::DigitsAfter(msg, "with error ") : status;
  }

  static std::optional<NetFailureKind> NetFailure(std::string_view msg) {
    if (Contains(msg, "Got completion from peer ")) {
      const std::string_view name = IbvStatusName(IbStatus(msg));
      std::string_view suspect = "unknown";
      if (name == "IBV_WC_RETRY_EXC_ERR" || name == "IBV_WC_RNR_RETRY_EXC_ERR" ||
          name == "IBV_WC_RESP_TIMEOUT_ERR")
        suspect = "link_or_peer";
      else if (name == "IBV_WC_WR_FLUSH_ERR")
        suspect = "consequence";
      else if (name == "IBV_WC_LOC_LEN_ERR" || name == "IBV_WC_LOC_QP_OP_ERR" ||
               name == "IBV_WC_LOC_PROT_ERR" || name == "IBV_WC_LOC_ACCESS_ERR")
        suspect = "local";
      else if (name == "IBV_WC_REM_INV_REQ_ERR" || name == "IBV_WC_REM_ACCESS_ERR" ||
               name == "IBV_WC_REM_OP_ERR")
        suspect = "remote";
      return NetFailureKind{"ib", suspect};
    }
    // The socket transport ("Net : ..." from misc/socket.cc): the peer went away.
    if (msg.starts_with("Net : ")) {
      if (Contains(msg, "Connection closed by remote peer") || Contains(msg, "Broken pipe") ||
          Contains(msg, "Connection reset by peer") || Contains(msg, "Connection refused"))
        return NetFailureKind{"socket", "peer"};
    }
    return std::nullopt;
  }

  static void NcclWarn(std::string_view t, int32_t rank, std::vector<ParsedEvent>& out) {
    const size_t warn = Find(t, "NCCL WARN ");
    if (warn == std::string_view::npos) return;
    ParsedEvent e = signals::ErrorEvent(kErrorNcclWarn, t, rank);
    // Header: the first token is host:pid:tid, then " [dev]".
    const std::string_view head = signals::StripLauncherPrefixes(t.substr(0, warn));
    const size_t sp = head.find(' ');
    if (sp != std::string_view::npos && sp < 256) {
      const std::string_view id = head.substr(0, sp);
      const size_t c2 = id.rfind(':');
      const size_t c1 = c2 == std::string_view::npos || c2 == 0 ? std::string_view::npos : id.rfind(':', c2 - 1);
      if (c1 != std::string_view::npos && c1 > 0) {
        const std::string_view host = id.substr(0, c1), pid = id.substr(c1 + 1, c2 - c1 - 1), tid = id.substr(c2 + 1);
        auto all_digits = [](std::string_view s) {
          if (s.empty() || s.size() > 10) return false;
          for (char c : s) if (!IsDigit(c)) return false;
          return true;
        };
        if (all_digits(pid) && all_digits(tid)) {
          AddAttr(e, "host", host);
          AddAttr(e, "pid", pid);
          AddAttr(e, "tid", tid);
          std::string_view rest = head.substr(sp + 1);
          if (rest.starts_with("[")) {
            const size_t close = rest.find(']');
            if (close != std::string_view::npos && close > 1 && all_digits(rest.substr(1, close - 1))) {
              AddAttr(e, "cuda_dev", rest.substr(1, close - 1));
              rest = SkipSpaces(rest.substr(close + 1));
            }
          }
          rest = signals::TrimRight(rest);
          if (!rest.empty() && rest.size() < 128 && rest.find(' ') == std::string_view::npos) AddAttr(e, "source", rest);
        }
      }
    }
    const std::string_view msg = t.substr(warn + 10);
    if (auto net = NetFailure(msg)) {
      e.name = std::string(kErrorNcclNetError);
      AddAttr(e, "transport", net->transport);
      AddAttr(e, "suspect", net->suspect);
    }
    // IB completion error, new ("with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid X
    // remoteGids Y") and old ("with error 4, opcode 32564, len 32564, vendor err 81 (Send)") wording.
    if (auto peer = signals::After(msg, "Got completion from peer ")) {
      const size_t lt = peer->find('<');
      const size_t stop = std::min(lt, peer->find(' '));
      if (stop != std::string_view::npos && stop > 0 && stop < 128) {
        AddAttr(e, "peer", peer->substr(0, stop));
        if (lt == stop) {
          const size_t gt = peer->find('>', lt);
          if (gt != std::string_view::npos && gt - lt < 8) AddAttr(e, "peer_port", peer->substr(lt + 1, gt - lt - 1));
        }
      }
      if (const std::string_view status = IbStatus(msg); !status.empty()) {
        AddAttr(e, "status", status);
        if (auto name = IbvStatusName(status); !name.empty()) AddAttr(e, "status_name", name);
      }
      std::string_view opcode = signals::DigitsAfter(msg, "opcode=");
      if (opcode.empty()) opcode = signals::DigitsAfter(msg, "opcode ");
      if (!opcode.empty()) AddAttr(e, "opcode", opcode);
      std::string_view len = signals::DigitsAfter(msg, "len=");
      if (len.empty()) len = signals::DigitsAfter(msg, "len ");
      if (!len.empty()) AddAttr(e, "len", len);
      if (auto ve = signals::DigitsAfter(msg, "vendor err "); !ve.empty()) {
        AddAttr(e, "vendor_err", ve);
        auto dir = signals::After(msg, "vendor err ");
        std::string_view d = SkipSpaces(dir->substr(ve.size()));
        if (d.starts_with("(")) {
          const size_t close = d.find(')');
          if (close != std::string_view::npos && close < 16) AddAttr(e, "direction", d.substr(1, close - 1));
        }
      }
      auto gid = [&](std::string_view key) -> std::string_view {
        auto g = signals::After(msg, key);
        if (!g) return {};
        std::string_view s = SkipSpaces(*g);
        return s.substr(0, std::min<size_t>(s.find(' '), 64));
      };
      if (auto g = gid("localGid"); !g.empty()) AddAttr(e, "local_gid", g);
      std::string_view remote = gid("remoteGids");  // NCCL glues the address on: "remoteGidsfd00:..."
      if (remote.empty()) remote = gid("remoteGid");
      if (!remote.empty()) AddAttr(e, "remote_gid", remote);
    }
    out.push_back(std::move(e));
  }

  // ---- torch.distributed.elastic ----------------------------------------------------------
  //   "...api:failed (exitcode: -9) local_rank: 4 (pid: 364592) of binary: /usr/bin/python"
  //   "...api:Sending process 153929 closing signal SIGTERM"
  //   ChildFailedError block: "  rank      : 1 (local_rank: 1)" / "  exitcode  : -6 (pid: 2385923)",
  //   "Root Cause (first observed failure):" before the first failure.
  void Elastic(std::string_view t, uint32_t hits, int32_t rank, std::vector<ParsedEvent>& out) {
    if ((hits & kRootCause) && Contains(t, "Root Cause (first observed failure)")) {
      root_cause_next_ = true;
      return;
    }
    if (hits & kLocalRank) {
      // Block line "rank      : 1 (local_rank: 1)".
      std::string_view s = SkipSpaces(t);
      if (s.starts_with("rank")) {
        std::string_view r = SkipSpaces(s.substr(4));
        if (r.starts_with(":")) {
          size_t used = 0;
          auto global = signals::LeadingInt(SkipSpaces(r.substr(1)), &used);
          auto local = signals::IntAfter(r, "(local_rank:");
          if (global && local) {
            block_rank_ = *global;
            block_local_rank_ = *local;
            return;
          }
        }
      }
    }
    if (hits & kClosingSignal) {
      // "Sending process 153929 closing signal SIGTERM"
      auto pid = signals::DigitsAfter(t, "Sending process ");
      auto sig = signals::After(t, "closing signal ");
      if (!pid.empty() && sig) {
        ParsedEvent e = signals::ErrorEvent(kErrorElasticFailure, t, rank);
        AddAttr(e, "pid", pid);
        std::string_view s = sig->substr(0, 16);
        size_t i = 0;
        while (i < s.size() && (signals::IsAlpha(s[i]) || IsDigit(s[i]))) ++i;
        if (i > 0) AddAttr(e, "signal", s.substr(0, i));
        AddAttr(e, "action", "terminate");
        out.push_back(std::move(e));
        return;
      }
    }
    if (!(hits & kExitcode)) return;
    auto rest = signals::After(t, "exitcode");
    if (!rest) return;
    std::string_view r = SkipSpaces(*rest);
    if (!r.starts_with(":")) return;
    size_t used = 0;
    auto code = signals::LeadingInt(SkipSpaces(r.substr(1)), &used);
    if (!code) return;
    ParsedEvent e = signals::ErrorEvent(kErrorElasticFailure, t, rank);
    AddAttr(e, "exit_code", static_cast<double>(*code));
    if (*code < 0) {
      if (auto name = signals::SignalName(-*code); !name.empty()) AddAttr(e, "signal", name);
    }
    if (auto lr = signals::DigitsAfter(t, "local_rank:"); !lr.empty()) {
      AddAttr(e, "local_rank", lr);
    } else if (block_local_rank_ >= 0) {
      AddAttr(e, "local_rank", static_cast<double>(block_local_rank_));
    }
    if (block_rank_ >= 0) AddAttr(e, "rank", static_cast<double>(block_rank_));
    if (auto pid = signals::DigitsAfter(t, "(pid:"); !pid.empty()) AddAttr(e, "pid", pid);
    if (auto bin = signals::After(t, "of binary: ")) AddAttr(e, "binary", signals::CutText(signals::TrimRight(*bin), 256));
    if (root_cause_next_) AddAttr(e, "root_cause", "1");
    block_rank_ = block_local_rank_ = -1;
    root_cause_next_ = false;
    out.push_back(std::move(e));
  }

  // ---- NaN/inf loss ----------------------------------------------------------------------
  // A key containing "loss" (loss, lm loss, 'loss', train_loss, reduced_train_loss, val_loss...)
  // followed by ':' or '=' and a NaN/inf spelling. Not "loss scale", not grad_norm.
  static void NanLoss(std::string_view t, size_t first, std::vector<ParsedEvent>& out) {
    for (size_t p = first; p != std::string_view::npos; p = FindLoss(t, p + 1)) {
      size_t end = p + 4;
      while (end < t.size() && end - p < 48 && (signals::IsWordChar(t[end]) || t[end] == '/')) ++end;
      size_t start = p;
      while (start > 0 && p - start < 48 && (signals::IsWordChar(t[start - 1]) || t[start - 1] == '/')) --start;
      const std::string_view key = t.substr(start, end - start);
      // "loss scale" / "loss_scale" / "loss scaler" are the fp16 scaler, not a loss.
      if (Contains(key, "scale") || Contains(key, "Scale") ||
          SkipSpaces(t.substr(end)).starts_with("scale") || SkipSpaces(t.substr(end)).starts_with("Scale"))
        continue;
      std::string_view v = t.substr(end);
      if (!v.empty() && (v[0] == '\'' || v[0] == '"')) v.remove_prefix(1);
      // nanoGPT separates with one space ("iter 11: loss nan, time ..."): accepted only when the
      // value is followed by ',' or the end of the line, so prose ("loss nan issues") is not.
      const bool space_only = !v.empty() && v[0] == ' ' && v.size() > 1 && v[1] != ' ' && v[1] != ':' && v[1] != '=';
      v = SkipSpaces(v);
      if (v.empty()) continue;
      if (v[0] == ':' || v[0] == '=') {
        v = SkipSpaces(v.substr(1));
      } else if (!space_only) {
        continue;
      }
      if (!v.empty() && (v[0] == '\'' || v[0] == '"')) v.remove_prefix(1);
      std::string_view tok = signals::NumberToken(v);
      if (tok.empty() || signals::IsDigit(tok[0]) || tok[0] == '.') continue;  // finite: no parse needed
      if (space_only) {
        const std::string_view after = v.substr(tok.size());
        if (!after.empty() && after[0] != ',') continue;
      }
      auto num = ParseNumber(tok);
      if (!num || std::isfinite(*num)) continue;
      ParsedEvent e = signals::ErrorEvent(kErrorNanLoss, t, signals::LinePrefixRank(t));
      e.value = *num;
      AddAttr(e, "key", key);
      AddAttr(e, "value", signals::FormatNumber(*num));
      out.push_back(std::move(e));
      return;  // one per line
    }
  }
  int traceback_age_ = -1;  // lines since a traceback started; -1 = none open
  int64_t block_rank_ = -1;
  int64_t block_local_rank_ = -1;
  bool root_cause_next_ = false;
};

}  // namespace

std::unique_ptr<FormatParser> MakeErrorParser() { return std::make_unique<ErrorParser>(); }

}  // namespace ithbat::collect::joblog
