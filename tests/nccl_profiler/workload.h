#pragma once
// Helpers of the nccl_profiler tests: run the fake NCCL workload (sim/) as child processes with
// extra environment, wait for them, read what they wrote.
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <sys/types.h>

namespace ithbat::testing {

struct Child {
  pid_t pid = -1;
  std::filesystem::path out;  // stdout
  std::filesystem::path err;  // stderr
};

// fork + exec `argv` with `env` added to (and overriding) the test's environment.
Child Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::filesystem::path& dir, const std::string& tag);
// The exit status (WEXITSTATUS, or 128 + signal); -1 when it did not exit within `timeout`
// (then it is killed).
int WaitExit(const Child& c, std::chrono::milliseconds timeout);
void Kill(const Child& c);
std::string ReadAll(const std::filesystem::path& p);
// Polls until the file contains `text`; false after `timeout`.
bool WaitForText(const std::filesystem::path& p, const std::string& text, std::chrono::milliseconds timeout);

}  // namespace ithbat::testing
