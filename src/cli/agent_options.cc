#include "cli/agent_options.h"

#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect/joblog/joblog_collector.h"
#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/tail_source.h"
#include "serve/http_server.h"

namespace ithbat::cli {
namespace {

Result<TimeNs> ResolveDuration(std::string_view key, const std::string& text, TimeNs min, TimeNs max) {
  auto d = ParseDuration(text);
  if (!d)
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: invalid duration '{}': {}", key, text,
                      d.error().message);
  if (*d < min || *d > max) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: '{}' is out of range ({}ms to {}s)", key, text,
                      min / kNsPerMs, max / kNsPerSec);
  }
  return *d;
}

// A plain decimal number in [lo, hi].
Result<double> ResolveNumber(std::string_view key, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: '{}' is not a number in [{}, {}]", key, text, lo, hi);
  }
  return v;
}

Result<uint64_t> ResolveSize(std::string_view key, const std::string& text, uint64_t min) {
  auto s = ParseByteSize(text);
  if (!s)
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: invalid size '{}': {}", key, text, s.error().message);
  if (*s < min)
    return MakeErrorF(ErrorCode::kInvalidArgument, "{}: '{}' is below the minimum of {} bytes", key, text,
                      min);
  return *s;
}

bool IsTokenChar(char c) {
  // RFC 6750 b64token plus what people paste from `openssl rand -base64`/-hex.
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '+' || c == '/' || c == '=';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

AgentFlags::AgentFlags() : listen(fmt::format("127.0.0.1:{}", serve::kDefaultPort)) {}

void AddAgentFlags(CLI::App& cmd, AgentFlags& f) {
  cmd.add_option("--listen", f.listen,
                 "Address and port to serve /metrics and the API on (ADDR:PORT; port 0 = any free port)")
      ->capture_default_str();
  cmd.add_option(
      "--token-file", f.token_file,
      "File holding a bearer token required on every path but /healthz (must not be world-readable)");
  cmd.add_flag("--insecure-listen-without-token", f.insecure_listen_without_token,
               "Serve on a --listen address beyond loopback without --token-file (refused otherwise)");
  cmd.add_option("--procfs", f.procfs, "Root of the proc file system to read node statistics from")
      ->capture_default_str();
  cmd.add_option("--sysfs", f.sysfs, "Root of the sys file system (InfiniBand ports)")
      ->capture_default_str();
  cmd.add_option("--nvml-library", f.nvml_library,
                 "NVML library to load with dlopen: a soname searched the usual way, or a path")
      ->capture_default_str();
  cmd.add_option("--kmsg", f.kmsg, "Kernel log to read Xid lines from: /dev/kmsg or a file to follow (\"\" = off)")
      ->capture_default_str();
  cmd.add_option(
         "--slurm-spool", f.slurm_spool,
         "Directory where `ithbat slurm-hook` (Slurm's Prolog/Epilog) leaves job start and end records: "
         "user, account, GPUs, exit code (docs/slurm.md; \"\" = off)")
      ->capture_default_str();
  cmd.add_option("--node", f.node,
                 "Node name reported by the agent (default: the host name); when set, /metrics labels every "
                 "series node=NAME");
  cmd.add_option("--cluster", f.cluster,
                 "Cluster name reported by the agent; when set, /metrics labels every series cluster=NAME");
  cmd.add_flag("--dcgm-exporter-names", f.dcgm_exporter_names,
               "Also expose the GPU counters under dcgm-exporter's metric and label names (DCGM_FI_*), so "
               "dashboards and alerts built for dcgm-exporter work unchanged (docs/metrics.md)");
  cmd.add_option("--interval", f.interval, "Collection interval")->capture_default_str();
  cmd.add_option("--collect-deadline", f.collect_deadline, "A collection running longer is marked hung")
      ->capture_default_str();
  cmd.add_option("--data-dir", f.data_dir, "Directory for history on disk (empty: memory only)");
  cmd.add_option("--retention", f.retention, "How long samples and events are kept")->capture_default_str();
  cmd.add_option("--memory-budget", f.memory_budget, "Memory for compressed samples and events")
      ->capture_default_str();
  cmd.add_option("--disk-budget", f.disk_budget, "Disk space for history in --data-dir")
      ->capture_default_str();
  cmd.add_option("--flush-interval", f.flush_interval, "How often new data is written to --data-dir")
      ->capture_default_str();
  cmd.add_option("--log-format", f.log_format, "Log format on stderr: human or json")->capture_default_str();
  cmd.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  cmd.add_option("--joblog", f.joblog,
                 "Job output capture: ebpf (kernel capture of tracked processes' stdout/stderr), tail "
                 "(only the files of --joblog-tail) or off")
      ->capture_default_str();
  cmd.add_option("--joblog-tail", f.joblog_tail,
                 "Log files to follow, comma-separated, each PATH or PATH?job=ID&rank=N (the identity of "
                 "its lines)");
  cmd.add_option("--joblog-format", f.joblog_format,
                 "Parser of job output: auto (detected per process) or one framework's name")
      ->capture_default_str();
  cmd.add_option("--joblog-patterns", f.joblog_patterns, "JSON file of user pattern sets for job output");
  cmd.add_option("--joblog-opt-out", f.joblog_opt_out,
                 "Jobs and users whose output is never captured, comma-separated: job:ID, user:NAME");
  cmd.add_option("--probe-budget", f.probe_budget,
                 "CUDA probes: time the launch probes may add to each process, as a fraction of wall time "
                 "(over it they are duty-cycled and launch counts extrapolated); 0 = always attached")
      ->capture_default_str();
  cmd.add_option("--probe-cost-ns", f.probe_cost_ns,
                 "CUDA probes: cost of one probe hit in ns for the budget; 0 = measured at start")
      ->capture_default_str();
  cmd.add_option("--sched-io", f.sched_io,
                 "Host scheduling (off-CPU by reason) and file I/O (write/fsync/close per mount) of the "
                 "tracked processes, through eBPF: on or off")
      ->capture_default_str();
  cmd.add_option("--diagnose-interval", f.diagnose_interval,
                 "How often the diagnosis engine runs over this node's store (/api/v1/diagnoses, "
                 "ithbat_diagnosis_* metrics); 0 = off")
      ->capture_default_str();
  cmd.add_option("--diagnose-lookback", f.diagnose_lookback,
                 "How far back each diagnosis round looks (at least the longest detector window, 10 min)")
      ->capture_default_str();
  cmd.add_option("--diagnose-resolve-after", f.diagnose_resolve_after,
                 "A diagnosis no finding supports for this long is resolved")
      ->capture_default_str();
  cmd.add_option("--list-price", f.list_price,
                 "List price in $/GPU-hour: diagnoses then carry the effective price (list ÷ productive share); 0 = off")
      ->capture_default_str();
  cmd.add_flag("--once", f.once, "Collect one round (two ticks), print the /metrics text to stdout and exit")
      ->configurable(false);
}

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "expected ADDR:PORT, got '{}' ({})", text, why);
  };
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return bad("no address");
  if (host.size() > 255) return bad("address too long");
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == ':' || c == '-' || c == '%' || c == '_';
    if (!ok) return bad("invalid character in address");
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return bad("port must be 0-65535");
  }
  return ListenAddress{std::string(host), static_cast<uint16_t>(port)};
}

bool IsValidLogLevel(std::string_view level) {
  static constexpr std::array<std::string_view, 7> kLevels = {"trace", "debug",    "info", "warn",
                                                              "error", "critical", "off"};
  for (auto l : kLevels) {
    if (l == level) return true;
  }
  return false;
}

std::string HostName() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return std::string(buf.data());
}

Result<AgentOptions> ResolveAgentOptions(const AgentFlags& f) {
  AgentOptions o;
  auto listen = ParseListenAddress(f.listen);
  if (!listen) return MakeErrorF(ErrorCode::kInvalidArgument, "listen: {}", listen.error().message);
  o.listen_address = listen->host;
  o.listen_port = listen->port;

  o.token_file = f.token_file;
  if (Status s = CheckListenNeedsToken(o.listen_address, !o.token_file.empty(), f.insecure_listen_without_token);
      !s) {
    return std::unexpected(s.error());
  }
  if (f.procfs.empty()) return MakeError(ErrorCode::kInvalidArgument, "procfs: must not be empty");
  if (f.sysfs.empty()) return MakeError(ErrorCode::kInvalidArgument, "sysfs: must not be empty");
  o.procfs = f.procfs;
  o.sysfs = f.sysfs;
  if (f.nvml_library.empty()) return MakeError(ErrorCode::kInvalidArgument, "nvml-library: must not be empty");
  o.nvml_library = f.nvml_library;
  o.kmsg = f.kmsg;
  o.slurm_spool = f.slurm_spool;
  o.node = f.node.empty() ? HostName() : f.node;
  o.node_given = !f.node.empty();
  o.cluster = f.cluster;
  o.dcgm_exporter_names = f.dcgm_exporter_names;
  if (o.node.size() > 253) return MakeError(ErrorCode::kInvalidArgument, "node: longer than 253 characters");
  if (o.cluster.size() > 253)
    return MakeError(ErrorCode::kInvalidArgument, "cluster: longer than 253 characters");

  auto interval = ResolveDuration("interval", f.interval, kMinInterval, kMaxInterval);
  if (!interval) return std::unexpected(interval.error());
  o.interval = *interval;
  auto deadline = ResolveDuration("collect-deadline", f.collect_deadline, kMinInterval, kMaxInterval);
  if (!deadline) return std::unexpected(deadline.error());
  o.collect_deadline = *deadline;
  auto flush = ResolveDuration("flush-interval", f.flush_interval, 100 * kNsPerMs, kMaxInterval);
  if (!flush) return std::unexpected(flush.error());
  o.flush_interval = *flush;
  auto retention = ResolveDuration("retention", f.retention, kNsPerSec, 3650LL * 24 * 3600 * kNsPerSec);
  if (!retention) return std::unexpected(retention.error());
  o.retention = *retention;

  o.data_dir = f.data_dir;
  auto memory = ResolveSize("memory-budget", f.memory_budget, 1 << 20);
  if (!memory) return std::unexpected(memory.error());
  o.memory_budget_bytes = *memory;
  auto disk = ResolveSize("disk-budget", f.disk_budget, 1 << 20);
  if (!disk) return std::unexpected(disk.error());
  o.disk_budget_bytes = *disk;

  auto format = agent::ParseLogFormat(f.log_format);
  if (!format)
    return MakeErrorF(ErrorCode::kInvalidArgument, "log-format: '{}' is not human or json", f.log_format);
  o.log_format = *format;
  if (!IsValidLogLevel(f.log_level)) {
    return MakeErrorF(ErrorCode::kInvalidArgument,
                      "log-level: '{}' is not one of trace, debug, info, warn, error, critical, off",
                      f.log_level);
  }
  o.log_level = f.log_level;

  if (auto mode = collect::joblog::ParseCaptureMode(f.joblog); !mode) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "joblog: {}", mode.error().message);
  }
  o.joblog = f.joblog;
  std::string_view tail = f.joblog_tail;
  while (!tail.empty()) {
    size_t comma = tail.find(',');
    std::string_view spec = tail.substr(0, comma);
    tail = comma == std::string_view::npos ? std::string_view() : tail.substr(comma + 1);
    if (spec.empty()) continue;
    if (auto t = collect::joblog::ParseTailSpec(spec); !t) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-tail: {}", t.error().message);
    }
    if (o.joblog_tail.size() >= 256) return MakeError(ErrorCode::kInvalidArgument, "joblog-tail: more than 256 files");
    o.joblog_tail.emplace_back(spec);
  }
  {
    collect::joblog::StreamParserOptions po;
    po.format = f.joblog_format;
    if (auto p = collect::joblog::StreamParser::Create(std::move(po)); !p) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-format: {}", p.error().message);
    }
    o.joblog_format = f.joblog_format;
  }
  o.joblog_patterns = f.joblog_patterns;
  if (!f.joblog_patterns.empty()) {
    auto patterns = collect::joblog::UserPatterns::Load(f.joblog_patterns);
    if (!patterns) return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-patterns: {}", patterns.error().message);
    o.joblog_user_patterns = std::make_shared<const collect::joblog::UserPatterns>(std::move(*patterns));
  }
  if (auto list = collect::joblog::ParseOptOutList(f.joblog_opt_out); !list) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "joblog-opt-out: {}", list.error().message);
  }
  o.joblog_opt_out = f.joblog_opt_out;
  {
    // Plain decimal numbers within bounds (a budget over 1 or a negative cost means nothing).
    auto budget = ResolveNumber("probe-budget", f.probe_budget, 0, 1);
    if (!budget) return std::unexpected(budget.error());
    o.probe_budget = *budget;
    auto cost = ResolveNumber("probe-cost-ns", f.probe_cost_ns, 0, 1e9);
    if (!cost) return std::unexpected(cost.error());
    o.probe_cost_ns = *cost;
  }
  if (f.sched_io != "on" && f.sched_io != "off") {
    return MakeErrorF(ErrorCode::kInvalidArgument, "sched-io: expected on or off, got '{}'", f.sched_io);
  }
  o.sched_io = f.sched_io == "on";
  if (auto zero = ParseDuration(f.diagnose_interval); f.diagnose_interval == "0" || (zero && *zero == 0)) {
    o.diagnose_interval = 0;
  } else {
    // At least 1 s: a round reads up to 15 minutes of the store; more often is load, not news.
    auto diagnose = ResolveDuration("diagnose-interval", f.diagnose_interval, kNsPerSec, kMaxInterval);
    if (!diagnose) return std::unexpected(diagnose.error());
    o.diagnose_interval = *diagnose;
  }
  // The stragglers and hang detectors look 10 minutes back; a shorter lookback would blind them.
  auto lookback = ResolveDuration("diagnose-lookback", f.diagnose_lookback, 10 * 60 * kNsPerSec, 24 * 3600 * kNsPerSec);
  if (!lookback) return std::unexpected(lookback.error());
  o.diagnose_lookback = *lookback;
  auto resolve = ResolveDuration("diagnose-resolve-after", f.diagnose_resolve_after, kNsPerSec, 24 * 3600 * kNsPerSec);
  if (!resolve) return std::unexpected(resolve.error());
  o.diagnose_resolve_after = *resolve;
  auto price = ResolveNumber("list-price", f.list_price, 0, 1e6);  // $/GPU-hour
  if (!price) return std::unexpected(price.error());
  o.list_price_per_gpu_hour = *price;
  o.once = f.once;
  return o;
}

Result<std::string> FollowTrustedLinks(const std::string& path, std::string_view what) {
  std::string at = path;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (lstat(at.c_str(), &st) != 0) {
      const int err = errno;
      return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, fmt::format("{} {}", what, at),
                        err);
    }
    if (!S_ISLNK(st.st_mode)) return at;
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
      return MakeErrorF(
          ErrorCode::kPermission,
          "{} {} is a symlink owned by uid {}: refused (only root's or this user's links are followed)", what,
          at, st.st_uid);
    }
    if (hops >= kMaxSecretFileLinks) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "{} {}: more than {} symlinks", what, path,
                        kMaxSecretFileLinks);
    }
    char target[PATH_MAX];
    const ssize_t n = readlink(at.c_str(), target, sizeof target - 1);
    if (n < 0) return ErrnoError(ErrorCode::kIo, fmt::format("{} {}", what, at), errno);
    target[n] = '\0';
    std::filesystem::path next(target);
    at = next.is_absolute() ? next.string() : (std::filesystem::path(at).parent_path() / next).string();
  }
}

Result<std::string> ReadSecretFile(const std::string& path, std::string_view what) {
  auto resolved = FollowTrustedLinks(path, what);
  if (!resolved) return std::unexpected(resolved.error());
  int fd = open(resolved->c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    return ErrnoError(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, fmt::format("{} {}", what, path),
                      err);
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return ErrnoError(ErrorCode::kIo, fmt::format("{} {}", what, path), errno);
  if (!S_ISREG(st.st_mode)) {
    return MakeErrorF(ErrorCode::kInvalidArgument, "{} {} is not a regular file", what, path);
  }
  if ((st.st_mode & S_IROTH) != 0) {
    return MakeErrorF(ErrorCode::kPermission, "{} {} is readable by every user (mode {:04o}); run: chmod 600 {}",
                      what, path, st.st_mode & 07777, path);
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretFileBytes)) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{} {} is larger than {} bytes", what, path,
                      kMaxSecretFileBytes);
  }
  std::string content(kMaxSecretFileBytes + 1, '\0');
  size_t got = 0;
  while (got < content.size()) {
    ssize_t n = read(fd, content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(ErrorCode::kIo, fmt::format("{} {}", what, path), errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxSecretFileBytes) {
    return MakeErrorF(ErrorCode::kResourceExhausted, "{} {} is larger than {} bytes", what, path,
                      kMaxSecretFileBytes);
  }
  content.resize(got);
  std::string_view secret = Trim(content);
  if (secret.empty()) return MakeErrorF(ErrorCode::kInvalidArgument, "{} {} is empty", what, path);
  return std::string(secret);
}

Result<std::string> ReadTokenFile(const std::string& path) {
  auto token = ReadSecretFile(path, "token file");
  if (!token) return token;
  for (char c : *token) {
    if (!IsTokenChar(c)) {
      return MakeErrorF(
          ErrorCode::kInvalidArgument,
          "token file {} holds a character that cannot be sent in an HTTP header (allowed: letters, "
          "digits, - . _ ~ + / =)",
          path);
    }
  }
  return token;
}

bool IsLoopbackAddress(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;  // a wildcard, another address, or a name that may resolve to anything
}

Status CheckListenNeedsToken(std::string_view host, bool has_token, bool insecure_allowed) {
  if (has_token || insecure_allowed || IsLoopbackAddress(host)) return Ok();
  return MakeErrorF(ErrorCode::kInvalidArgument,
                    "listening on {} reaches beyond this machine, and no --token-file is given: anyone who "
                    "reaches it reads what it serves. Give --token-file, or say so with "
                    "--insecure-listen-without-token",
                    host);
}

}  // namespace ithbat::cli
