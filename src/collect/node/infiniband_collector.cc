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

constexpr size_t kMaxAttrBytes = 4096;

// counters/<file> → metric. The data counters count 4-octet words: the IBA spec defines
// PortXmitData/PortRcvData "in units of 32 bits" (the sum of all octets divided by 4), so the
// byte metrics multiply by 4.
struct CounterFile {
  std::string_view file;
  std::string_view metric;
  std::string_view unit;
  std::string_view help;
  double scale;
};
constexpr std::array<CounterFile, 10> kCounterFiles = {{
    {"port_rcv_data", "ithbat_ib_receive_bytes_total", "bytes",
     "Bytes received on the port (port_rcv_data x 4: the counter counts 4-octet words)", 4},
    {"port_xmit_data", "ithbat_ib_transmit_bytes_total", "bytes",
     "Bytes transmitted on the port (port_xmit_data x 4: the counter counts 4-octet words)", 4},
    {"port_rcv_packets", "ithbat_ib_receive_packets_total", "", "Packets received on the port", 1},
    {"port_xmit_packets", "ithbat_ib_transmit_packets_total", "", "Packets transmitted on the port", 1},
    {"port_xmit_wait", "ithbat_ib_transmit_wait_total", "",
     "Ticks the port had data to send but no flow-control credits (congestion; port_xmit_wait)", 1},
    {"symbol_error", "ithbat_ib_symbol_errors_total", "", "Minor link errors detected on physical lanes", 1},
    {"link_downed", "ithbat_ib_link_downed_total", "",
     "Times the link failed its error recovery and went down", 1},
    {"link_error_recovery", "ithbat_ib_link_error_recovery_total", "",
     "Times the link completed error recovery successfully", 1},
    {"port_rcv_errors", "ithbat_ib_receive_errors_total", "", "Received packets that contained an error", 1},
    {"excessive_buffer_overrun_errors", "ithbat_ib_excessive_buffer_overrun_errors_total", "",
     "Times consecutive flow-control overruns exceeded the threshold", 1},
}};

// Desc layout: counters first (in kCounterFiles order), then these.
constexpr size_t kStateDesc = kCounterFiles.size();
constexpr size_t kPhysStateDesc = kStateDesc + 1;
constexpr size_t kRateDesc = kPhysStateDesc + 1;
constexpr size_t kHwCounterDesc = kRateDesc + 1;

std::vector<std::string> SortedChildren(const std::filesystem::path& dir, size_t max, std::error_code& ec) {
  std::vector<std::string> out;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path().filename().string());
    if (out.size() >= 4 * max) break;  // a hostile tree cannot make the listing unbounded
  }
  std::sort(out.begin(), out.end());
  if (out.size() > max) out.resize(max);
  return out;
}

}  // namespace

std::unique_ptr<InfinibandCollector> InfinibandCollector::Create(InfinibandOptions options) {
  return std::unique_ptr<InfinibandCollector>(new InfinibandCollector(std::move(options)));
}

InfinibandCollector::InfinibandCollector(InfinibandOptions options)
    : NodeCollectorBase("infiniband", 0), options_(std::move(options)) {
  const InfinibandOptions defaults;
  if (options_.max_devices == 0) options_.max_devices = defaults.max_devices;
  if (options_.max_ports_per_device == 0) options_.max_ports_per_device = defaults.max_ports_per_device;
  if (options_.max_hw_counters_per_port == 0)
    options_.max_hw_counters_per_port = defaults.max_hw_counters_per_port;
  root_ = options_.sysfs / "class" / "infiniband";
  const std::vector<std::string> l = {"device", "port"};
  for (const CounterFile& f : kCounterFiles) {
    AddDesc(std::string(f.metric), std::string(f.help), std::string(f.unit), MetricType::kCounter, l);
  }
  AddDesc(
      "ithbat_ib_port_state",
      "Logical port state as a number (1 down, 2 init, 3 armed, 4 active, 5 active_defer); the state label "
      "names it",
      "", MetricType::kGauge, {"device", "port", "state"});
  AddDesc(
      "ithbat_ib_port_physical_state",
      "Physical port state as a number (2 polling, 3 disabled, 5 link up, 6 link error recovery, ...); the "
      "state label names it",
      "", MetricType::kGauge, {"device", "port", "state"});
  AddDesc("ithbat_ib_port_rate_bytes_per_second", "Signalling rate of the port (rate in Gb/s x 1e9 / 8)",
          "bytes_per_second", MetricType::kGauge, l);
  AddDesc(
      "ithbat_ib_hw_counters_total",
      "Driver-specific port counters from hw_counters (mlx5: out_of_buffer, rnr_nak_retry_err, ...), by name",
      "", MetricType::kCounter, {"device", "port", "counter"});
  // Entities: per port 1 (counters, rate) + 2 (state labels, which can change) + hw counters.
  SetMaxEntities(options_.max_devices * options_.max_ports_per_device *
                 (options_.max_hw_counters_per_port + 16));
}

Status InfinibandCollector::InitImpl(Sink& sink) {
  if (Status s = CheckRoot(options_.sysfs, "sysfs"); !s) return s;
  sink_ = &sink;
  return Ok();
}

bool InfinibandCollector::ReadSmall(const std::filesystem::path& path) {
  if (Status s = ReadFileBoundedInto(path, kMaxAttrBytes, &buffer_); !s) {
    ReportError(s.error());
    return false;
  }
  return true;
}

Status InfinibandCollector::CollectImpl(TimeNs t) {
  std::error_code ec;
  std::vector<std::string> devices;
  if (std::filesystem::is_directory(root_, ec)) devices = SortedChildren(root_, options_.max_devices, ec);
  if (devices.empty()) {
    if (!missing_) {
      missing_ = true;
      SetDegraded(fmt::format("no InfiniBand/RoCE devices under {}; no ib series", root_.string()));
    }
    return Ok();
  }
  if (missing_) {
    missing_ = false;
    SetDegraded("");
  }
  BeginTick();
  for (const std::string& device : devices) {
    const std::filesystem::path ports_dir = root_ / device / "ports";
    std::error_code pec;
    for (const std::string& port : SortedChildren(ports_dir, options_.max_ports_per_device, pec)) {
      CollectPort(device, port, ports_dir / port, t);
    }
    if (pec)
      ReportError(Error{ErrorCode::kIo, fmt::format("list {}: {}", ports_dir.string(), pec.message())});
  }
  EndTick();
  return Ok();
}

void InfinibandCollector::CollectPort(const std::string& device, const std::string& port,
                                      const std::filesystem::path& dir, TimeNs t) {
  key_.assign(device).push_back('\0');
  key_.append(port);
  Entity* e = GetEntity(key_, [&] { return LabelPairs{{"device", device}, {"port", port}}; });
  if (e == nullptr) return;

  std::error_code ec;
  const std::filesystem::path counters = dir / "counters";
  if (std::filesystem::is_directory(counters, ec)) {
    for (size_t i = 0; i < kCounterFiles.size(); i++) {
      const std::filesystem::path path = counters / kCounterFiles[i].file;
      if (Status s = ReadFileBoundedInto(path, kMaxAttrBytes, &buffer_); !s) {
        // Not every driver has every counter (RoCE lacks some); a missing one is no error.
        if (s.error().code != ErrorCode::kNotFound) ReportError(s.error());
        continue;
      }
      auto v = ParseSysfsCounter(buffer_);
      if (!v) {
        ReportError(Error{v.error().code, fmt::format("{}: {}", path.string(), v.error().message)});
        continue;
      }
      Emit(e, i, t, static_cast<double>(*v) * kCounterFiles[i].scale);
    }
  }

  const std::array<std::pair<std::string_view, size_t>, 2> states = {
      {{"state", kStateDesc}, {"phys_state", kPhysStateDesc}}};
  for (const auto& [file, desc] : states) {
    const std::filesystem::path path = dir / file;
    if (!std::filesystem::exists(path, ec)) continue;
    if (!ReadSmall(path)) continue;
    auto st = ParseIbEnum(buffer_);
    if (!st) {
      ReportError(Error{st.error().code, fmt::format("{}: {}", path.string(), st.error().message)});
      continue;
    }
    const size_t base = key_.size();
    key_.push_back('\0');
    key_.append(file).push_back('\0');
    key_.append(st->label);
    Entity* se = GetEntity(key_, [&] {
      return LabelPairs{{"device", device}, {"port", port}, {"state", st->label}};
    });
    key_.resize(base);
    Emit(se, desc, t, st->value);
  }

  if (const std::filesystem::path path = dir / "rate"; std::filesystem::exists(path, ec) && ReadSmall(path)) {
    auto gbps = ParseIbRateGbps(buffer_);
    if (gbps) {
      Emit(e, kRateDesc, t, *gbps * 1e9 / 8);
    } else {
      ReportError(Error{gbps.error().code, fmt::format("{}: {}", path.string(), gbps.error().message)});
    }
  }

  const std::filesystem::path hw = dir / "hw_counters";
  if (std::filesystem::is_directory(hw, ec)) {
    std::error_code hec;
    for (const std::string& name : SortedChildren(hw, options_.max_hw_counters_per_port, hec)) {
      const std::filesystem::path path = hw / name;
      if (!std::filesystem::is_regular_file(path, ec)) continue;
      // lifespan is a setting (ms between refreshes), not a counter.
      if (name == "lifespan") continue;
      if (Status s = ReadFileBoundedInto(path, kMaxAttrBytes, &buffer_); !s) {
        ReportError(s.error());
        continue;
      }
      auto v = ParseSysfsCounter(buffer_);
      if (!v) {
        ReportError(Error{v.error().code, fmt::format("{}: {}", path.string(), v.error().message)});
        continue;
      }
      const size_t base = key_.size();
      key_.append("\0hw\0", 4).append(name);
      Entity* he = GetEntity(key_, [&] {
        return LabelPairs{{"device", device}, {"port", port}, {"counter", name}};
      });
      key_.resize(base);
      Emit(he, kHwCounterDesc, t, static_cast<double>(*v));
    }
  }
}

}  // namespace ithbat::collect
