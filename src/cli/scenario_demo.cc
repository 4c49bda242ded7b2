#include "cli/scenario_demo.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ithbat::cli {
namespace {

bool Executable(const std::filesystem::path& p) { return access(p.c_str(), X_OK) == 0; }

std::filesystem::path SelfDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(buf, static_cast<size_t>(n))).parent_path();
}

}  // namespace

Result<std::string> FindLabBinary() {
  if (const char* env = std::getenv("ITHBAT_LAB"); env != nullptr && *env != '\0') {
    if (Executable(env)) return std::string(env);
    return MakeErrorF(ErrorCode::kNotFound, "ITHBAT_LAB={} is not an executable", env);
  }
  const auto self = SelfDir();
  for (const auto& candidate : {self / "sim" / "ithbat-lab", self / "ithbat-lab",
                                std::filesystem::path(ITHBAT_BUILD_DIR) / "sim" / "ithbat-lab"}) {
    if (!candidate.empty() && Executable(candidate)) return candidate.string();
  }
  return MakeError(ErrorCode::kNotFound,
                   "the scenario lab is not built (cmake --build build --target ithbat_lab ithbat_sim), "
                   "or set ITHBAT_LAB");
}

Result<std::string> ResolveScenarioArgument(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) return arg;
  if (arg.find('/') != std::string::npos) return MakeErrorF(ErrorCode::kNotFound, "{}: no such file", arg);
  const char* env = std::getenv("ITHBAT_SCENARIOS");
  const std::filesystem::path dir =
      env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path(ITHBAT_SOURCE_DIR) / "scenarios";
  const std::string name = arg.ends_with(".yaml") ? arg : arg + ".yaml";
  const auto path = dir / name;
  if (std::filesystem::is_regular_file(path, ec)) return path.string();
  return MakeErrorF(ErrorCode::kNotFound, "{}: not a file and not a scenario in {}", arg, dir.string());
}

std::vector<std::string> LabArguments(const std::string& lab, const ScenarioDemoOptions& options,
                                      const std::vector<std::string>& files) {
  std::vector<std::string> argv = {lab, "--require-diagnosis", "--adapt"};
  if (options.quick) argv.push_back("--quick");
  if (options.slowdown > 1.0) {
    argv.push_back("--slowdown");
    argv.push_back(fmt::format("{}", options.slowdown));
  }
  if (options.json) argv.push_back("--json");
  if (options.seed) {
    argv.push_back("--seed");
    argv.push_back(std::to_string(*options.seed));
  }
  argv.insert(argv.end(), files.begin(), files.end());
  return argv;
}

int RunScenarioDemo(const ScenarioDemoOptions& options) {
  auto lab = FindLabBinary();
  if (!lab) {
    fmt::print(stderr, "ithbat demo: {}\n", lab.error().message);
    return 1;
  }
  std::vector<std::string> files;
  for (const auto& s : options.scenarios) {
    auto path = ResolveScenarioArgument(s);
    if (!path) {
      fmt::print(stderr, "ithbat demo: {}\n", path.error().message);
      return 1;
    }
    files.push_back(*path);
  }
  const auto argv = LabArguments(*lab, options, files);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The lab forwards SIGINT/SIGTERM to the simulator, which tears the world down; the demo
  // only waits (a terminal's Ctrl-C reaches the whole foreground group anyway).
  pid_t pid = 0;
  if (const int rc = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0) {
    fmt::print(stderr, "ithbat demo: cannot start {}: {}\n", *lab, std::strerror(rc));
    return 1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 1;
}

}  // namespace ithbat::cli
