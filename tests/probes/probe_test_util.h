#pragma once
// Helpers shared by the root eBPF tests of tests/probes: a root-owned copy of the fake driver
// libraries (the collector dlopens a libcuda only from such a place) and a workload process
// held behind the preloaded start/exit gate (start_gate.cc), so probes attach before its first
// call and its last counts are read while it waits to exit.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ithbat::collect::probes::test_util {

namespace fs = std::filesystem;

inline bool WaitForFile(const fs::path& p, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    if (fs::exists(p)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

inline void Touch(const fs::path& p) { std::ofstream(p).put('\n'); }

// A directory under /run only root can write, holding copies of the fake libcuda.so.1 (and
// libnccl.so.2 with `with_nccl`); removed at destruction. `dir` is empty when it could not be made.
struct TrustedDriverDir {
  fs::path dir;
  explicit TrustedDriverDir(bool with_nccl = true) {
    char tmpl[] = "/run/ithbat-probes-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    dir = tmpl;
    chmod(dir.c_str(), 0755);
    fs::copy_file(ITHBAT_FAKE_CUDA_PATH, dir / "libcuda.so.1");
    chmod((dir / "libcuda.so.1").c_str(), 0755);
    if (with_nccl) {
      fs::copy_file(ITHBAT_FAKE_NCCL_PATH, dir / "libnccl.so.2");
      chmod((dir / "libnccl.so.2").c_str(), 0755);
    }
  }
  ~TrustedDriverDir() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  TrustedDriverDir(const TrustedDriverDir&) = delete;
  TrustedDriverDir& operator=(const TrustedDriverDir&) = delete;
};

// A workload child behind the gate. stdout goes to a file; the workload prints one JSON line
// (its own counts) in the exit gate.
struct GatedChild {
  pid_t pid = -1;
  fs::path out, ready, start, exit_gate;

  // Starts `argv` with the gate preloaded and `env` added; waits until its libraries are mapped.
  void Start(const fs::path& dir, const std::string& name, std::vector<std::string> argv,
             std::vector<std::string> env) {
    out = dir / (name + ".out");
    ready = dir / (name + ".ready");
    start = dir / (name + ".start");
    exit_gate = dir / (name + ".exit");
    env.push_back(std::string("LD_PRELOAD=") + ITHBAT_PROBE_GATE_LIB);
    env.push_back("ITHBAT_GATE_READY=" + ready.string());
    env.push_back("ITHBAT_GATE_START=" + start.string());
    env.push_back("ITHBAT_GATE_EXIT=" + exit_gate.string());
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    ASSERT_TRUE(WaitForFile(ready, 30)) << name << " never reached the gate";
  }
  void Go() { Touch(start); }
  void LetExit() { Touch(exit_gate); }
  // Waits until the workload printed its JSON line (it flushes in the exit gate). Null on
  // failure (recorded as a test failure).
  nlohmann::json Result() {
    for (int i = 0; i < 6000; ++i) {
      std::ifstream in(out);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string s = ss.str();
      if (!s.empty() && s.back() == '\n') {
        nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
        if (j.is_discarded()) {
          ADD_FAILURE() << "the workload's output is not JSON: " << s;
          return {};
        }
        return j;
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        ADD_FAILURE() << "workload exited early, status " << status;
        pid = -1;
        return {};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no output from the workload";
    return {};
  }
  int Wait() {
    if (pid < 0) return -1;
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  // Opens the exit gate and reaps the process.
  void Finish() {
    if (pid < 0) return;
    LetExit();
    Wait();
  }
  ~GatedChild() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace ithbat::collect::probes::test_util
