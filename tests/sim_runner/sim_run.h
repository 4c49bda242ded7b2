#pragma once
// Helpers of the ithbat-sim end-to-end tests: start the binary, wait for it (bounded), read
// world.json, and find what a run may have left behind (processes, mounts, shm).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ithbat::sim::runner {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Starts ithbat-sim with `args`; stderr and stdout to `log`.
inline pid_t Start(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv = {ITHBAT_SIM_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stderr);
    (void)f;
    dup2(STDERR_FILENO, STDOUT_FILENO);
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    execv(ptrs[0], ptrs.data());
    _exit(127);
  }
  return pid;
}

// Waits (bounded, generously: a safety net, not a verdict) and returns the exit code.
inline int Wait(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "ithbat-sim did not finish within " << seconds << " s";
  return -1;
}

inline std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline json ReadWorld(const fs::path& root) {
  json j = json::parse(ReadFile(root / "world.json"), nullptr, false);
  return j.is_discarded() ? json() : j;
}

// Processes of the world: every child the runner starts (agents, launchers and their ranks and
// loader workers, burners, inference servers, slowfs daemons, io writers) carries
// ITHBAT_SIM_WORLD=<root> in its environment; a process naming the run dir on its command line
// counts too. None may outlive ithbat-sim.
inline std::vector<std::string> ProcessesUsing(const fs::path& root) {
  std::vector<std::string> out;
  const std::string needle = root.string();
  const std::string tag = "ITHBAT_SIM_WORLD=" + needle;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (name == std::to_string(getpid())) continue;
    const std::string environ = ReadFile(entry.path() / "environ");
    bool tagged = false;
    for (size_t at = environ.find(tag); at != std::string::npos; at = environ.find(tag, at + 1)) {
      const bool starts = at == 0 || environ[at - 1] == '\0';
      const size_t end = at + tag.size();
      if (starts && (end == environ.size() || environ[end] == '\0')) tagged = true;
    }
    std::string cmd = ReadFile(entry.path() / "cmdline");
    if (tagged || cmd.find(needle) != std::string::npos) {
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      out.push_back(name + ": " + cmd + (tagged ? " [ITHBAT_SIM_WORLD]" : ""));
    }
  }
  return out;
}

inline std::vector<std::string> MountsUnder(const fs::path& root) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(root.string()) != std::string::npos) out.push_back(line);
  }
  return out;
}

inline void ExpectNothingLeft(const json& world, const fs::path& root) {
  EXPECT_EQ(ProcessesUsing(root), std::vector<std::string>{});
  EXPECT_EQ(MountsUnder(root), std::vector<std::string>{});
  const std::string shm = world.value("nccl_shm_dir", std::string());
  EXPECT_FALSE(shm.empty());
  EXPECT_FALSE(fs::exists(shm)) << shm;
}

}  // namespace ithbat::sim::runner
