// ithbat-fake-state: drives a fake-hardware state file (sim/fake_state) from the shell, so that
// scripts (tests/integration/two_nodes.sh, hand experiments) can stand up simulated nodes for
// agents that load the fake libnvidia-ml.so.1 with ITHBAT_FAKE_STATE=FILE.
//
// Why a separate tool: scripts must never link or call into the agent to set up its inputs;
// this links only the fake-state API (sim/fake_state/fake_state_api.h), the same one the C++
// tests use. Every change is visible to the agents' next NVML call.
//
//   ithbat-fake-state create FILE [--gpus N] [--model h100|h200|a100] [--seed S]
//   ithbat-fake-state add-process FILE --gpu I --pid P --memory BYTES
//   ithbat-fake-state remove-process FILE --gpu I --pid P
//   ithbat-fake-state busy FILE --gpu I --seconds S [--sm X] [--tensor X] [--dram X] [--pid P]
//   ithbat-fake-state show FILE
//
// Exit codes: 0 done; 1 the operation failed (I/O, no such GPU, pid not on the GPU, full);
// 2 usage error (unknown command or option, bad or missing value). Messages go to stderr.
// The simulator will grow this; keep each command a thin wrapper over one FakeState call.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include "fake_state/fake_state.h"
#include "fake_state/fake_state_api.h"

namespace {

using ithbat::sim::FakeState;
using ithbat::sim::GpuModel;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

constexpr const char* kUsage =
    "usage: ithbat-fake-state COMMAND FILE [OPTIONS]\n"
    "  create FILE [--gpus N] [--model h100|h200|a100] [--seed S]\n"
    "      new state with N (1..16, default 8) idle GPUs; --seed (default: FILE's name) makes\n"
    "      UUIDs and serials differ between nodes. Do not recreate a file an agent has open.\n"
    "  add-process FILE --gpu I --pid P --memory BYTES   list P as a compute process on GPU I\n"
    "  remove-process FILE --gpu I --pid P               take it off the list again\n"
    "  busy FILE --gpu I --seconds S [--sm X] [--tensor X] [--dram X] [--pid P]\n"
    "      record work on GPU I over the last S seconds (shares X in 0..1; sm defaults to 1)\n"
    "  show FILE                                         one line per GPU\n"
    "exit codes: 0 ok, 1 operation failed, 2 usage error\n";

int Usage(const std::string& why) {
  fmt::print(stderr, "ithbat-fake-state: {} (ithbat-fake-state --help for usage)\n", why);
  return kExitUsage;
}

int Failed(const std::string& why) {
  fmt::print(stderr, "ithbat-fake-state: {}\n", why);
  return kExitFailed;
}

// Options of one command: "--name value" pairs, each at most once, names from `allowed`.
struct Options {
  std::map<std::string, std::string> values;
  std::string error;  // set when parsing failed
};

Options ParseOptions(const std::vector<std::string_view>& args, const std::set<std::string>& allowed) {
  Options o;
  for (size_t i = 0; i < args.size(); i += 2) {
    std::string name(args[i]);
    if (name.size() < 3 || name.compare(0, 2, "--") != 0) {
      o.error = fmt::format("unexpected argument '{}'", name);
      return o;
    }
    name = name.substr(2);
    if (!allowed.contains(name)) {
      o.error = fmt::format("unknown option '--{}' for this command", name);
      return o;
    }
    if (i + 1 >= args.size()) {
      o.error = fmt::format("option '--{}' needs a value", name);
      return o;
    }
    if (!o.values.emplace(name, std::string(args[i + 1])).second) {
      o.error = fmt::format("option '--{}' given twice", name);
      return o;
    }
  }
  return o;
}

// Strict unsigned parse of the whole text within [min, max].
bool ParseU64(const std::string& text, uint64_t min, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double min, double max, double* out) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < min || v > max)
    return false;
  *out = v;
  return true;
}

// Fetches a numeric option: required ones must be present; `*out` keeps its default otherwise.
// Returns an error text, empty on success.
std::string GetU64(const Options& o, const std::string& name, bool required, uint64_t min, uint64_t max,
                   uint64_t* out) {
  auto it = o.values.find(name);
  if (it == o.values.end()) return required ? fmt::format("missing --{}", name) : "";
  if (!ParseU64(it->second, min, max, out))
    return fmt::format("--{} must be an integer in {}..{}, got '{}'", name, min, max, it->second);
  return "";
}

std::string GetDouble(const Options& o, const std::string& name, bool required, double min, double max,
                      double* out) {
  auto it = o.values.find(name);
  if (it == o.values.end()) return required ? fmt::format("missing --{}", name) : "";
  if (!ParseDouble(it->second, min, max, out))
    return fmt::format("--{} must be a number in {}..{}, got '{}'", name, min, max, it->second);
  return "";
}

const char* ModelName(uint32_t model) {
  switch (static_cast<GpuModel>(model)) {
    case GpuModel::kH100Sxm: return "h100";
    case GpuModel::kH200Sxm: return "h200";
    case GpuModel::kA100Sxm: return "a100";
  }
  return "?";
}

int Create(const std::string& file, const Options& o) {
  uint64_t gpus = 8;
  if (auto e = GetU64(o, "gpus", false, 1, ithbat::sim::kMaxGpus, &gpus); !e.empty()) return Usage(e);
  GpuModel model = GpuModel::kH100Sxm;
  if (auto it = o.values.find("model"); it != o.values.end()) {
    if (it->second == "h100") {
      model = GpuModel::kH100Sxm;
    } else if (it->second == "h200") {
      model = GpuModel::kH200Sxm;
    } else if (it->second == "a100") {
      model = GpuModel::kA100Sxm;
    } else {
      return Usage(fmt::format("--model must be h100, h200 or a100, got '{}'", it->second));
    }
  }
  std::string seed = file.substr(file.rfind('/') == std::string::npos ? 0 : file.rfind('/') + 1);
  if (auto it = o.values.find("seed"); it != o.values.end()) seed = it->second;
  if (seed.empty() || seed.size() > 256) return Usage("--seed must be 1..256 characters");
  auto state = FakeState::Create(file, std::vector<GpuModel>(gpus, model), seed);
  if (!state) return Failed(fmt::format("cannot create {}: {}", file, state.error().ToString()));
  return kExitOk;
}

int OpenState(const std::string& file, std::unique_ptr<FakeState>* out) {
  auto state = FakeState::Open(file);
  if (!state) return Failed(fmt::format("cannot open {}: {}", file, state.error().ToString()));
  *out = std::move(*state);
  return kExitOk;
}

int AddProcess(const std::string& file, const Options& o) {
  uint64_t gpu = 0, pid = 0, memory = 0;
  if (auto e = GetU64(o, "gpu", true, 0, ithbat::sim::kMaxGpus - 1, &gpu); !e.empty()) return Usage(e);
  if (auto e = GetU64(o, "pid", true, 1, UINT32_MAX, &pid); !e.empty()) return Usage(e);
  if (auto e = GetU64(o, "memory", true, 0, UINT64_MAX, &memory); !e.empty()) return Usage(e);
  std::unique_ptr<FakeState> state;
  if (int rc = OpenState(file, &state); rc != kExitOk) return rc;
  if (auto s = state->AddProcess(static_cast<uint32_t>(gpu), static_cast<uint32_t>(pid), memory); !s)
    return Failed(s.error().ToString());
  return kExitOk;
}

int RemoveProcess(const std::string& file, const Options& o) {
  uint64_t gpu = 0, pid = 0;
  if (auto e = GetU64(o, "gpu", true, 0, ithbat::sim::kMaxGpus - 1, &gpu); !e.empty()) return Usage(e);
  if (auto e = GetU64(o, "pid", true, 1, UINT32_MAX, &pid); !e.empty()) return Usage(e);
  std::unique_ptr<FakeState> state;
  if (int rc = OpenState(file, &state); rc != kExitOk) return rc;
  if (auto s = state->RemoveProcess(static_cast<uint32_t>(gpu), static_cast<uint32_t>(pid)); !s)
    return Failed(s.error().ToString());
  return kExitOk;
}

int Busy(const std::string& file, const Options& o) {
  uint64_t gpu = 0, pid = 0;
  double seconds = 0, sm = 1.0, tensor = 0, dram = 0;
  if (auto e = GetU64(o, "gpu", true, 0, ithbat::sim::kMaxGpus - 1, &gpu); !e.empty()) return Usage(e);
  // A day bounds the interval: a longer one is a mistake, not a scenario.
  if (auto e = GetDouble(o, "seconds", true, 1e-6, 86400, &seconds); !e.empty()) return Usage(e);
  if (auto e = GetDouble(o, "sm", false, 0, 1, &sm); !e.empty()) return Usage(e);
  if (auto e = GetDouble(o, "tensor", false, 0, 1, &tensor); !e.empty()) return Usage(e);
  if (auto e = GetDouble(o, "dram", false, 0, 1, &dram); !e.empty()) return Usage(e);
  if (auto e = GetU64(o, "pid", false, 0, UINT32_MAX, &pid); !e.empty()) return Usage(e);
  std::unique_ptr<FakeState> state;
  if (int rc = OpenState(file, &state); rc != kExitOk) return rc;
  const int64_t end = ithbat::sim::RealtimeNs();
  const int64_t start = end - std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1e9)));
  if (auto s = state->AddBusyInterval(static_cast<uint32_t>(gpu), start, end, sm, tensor, dram,
                                      static_cast<uint32_t>(pid));
      !s)
    return Failed(s.error().ToString());
  return kExitOk;
}

int Show(const std::string& file) {
  std::unique_ptr<FakeState> state;
  if (int rc = OpenState(file, &state); rc != kExitOk) return rc;
  fmt::print("{}: {} GPUs\n", file, state->gpu_count());
  for (uint32_t i = 0; i < state->gpu_count(); ++i) {
    auto config = state->Config(i);
    if (!config) return Failed(config.error().ToString());
    const auto& slot = state->layout().gpus[i];
    const uint64_t intervals = __atomic_load_n(&slot.timeline.head, __ATOMIC_ACQUIRE);
    const bool lost = __atomic_load_n(&slot.faults.lost, __ATOMIC_RELAXED) != 0;
    const bool hang = __atomic_load_n(&slot.faults.hang, __ATOMIC_RELAXED) != 0;
    std::string procs;
    const uint32_t n = std::min(config->process_count, ithbat::sim::kMaxProcesses);
    for (uint32_t p = 0; p < n; ++p) {
      procs += fmt::format("{}{}:{}", p == 0 ? "" : ",", config->processes[p].pid, config->processes[p].used_bytes);
    }
    fmt::print("gpu {} {} {} intervals={} processes=[{}]{}{}\n", i, ModelName(config->model),
               std::string_view(config->uuid, strnlen(config->uuid, sizeof(config->uuid))), intervals, procs,
               lost ? " lost" : "", hang ? " hang" : "");
  }
  return kExitOk;
}

int Run(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "{}", kUsage);
    return kExitUsage;
  }
  const std::string_view command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    fmt::print("{}", kUsage);
    return kExitOk;
  }
  if (argc < 3) return Usage(fmt::format("'{}' needs a FILE", command));
  const std::string file = argv[2];
  if (file.empty() || file.size() > 4096) return Usage("FILE must be 1..4096 characters");
  std::vector<std::string_view> rest(argv + 3, argv + argc);

  std::set<std::string> allowed;
  if (command == "create") {
    allowed = {"gpus", "model", "seed"};
  } else if (command == "add-process") {
    allowed = {"gpu", "pid", "memory"};
  } else if (command == "remove-process") {
    allowed = {"gpu", "pid"};
  } else if (command == "busy") {
    allowed = {"gpu", "seconds", "sm", "tensor", "dram", "pid"};
  } else if (command == "show") {
    allowed = {};
  } else {
    return Usage(fmt::format("unknown command '{}'", command));
  }
  Options o = ParseOptions(rest, allowed);
  if (!o.error.empty()) return Usage(o.error);

  if (command == "create") return Create(file, o);
  if (command == "add-process") return AddProcess(file, o);
  if (command == "remove-process") return RemoveProcess(file, o);
  if (command == "busy") return Busy(file, o);
  return Show(file);
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
