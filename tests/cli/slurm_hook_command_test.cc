// `ithbat slurm-hook`: writes the record slurmd's environment describes, and never fails the job
// (a prolog that exits non-zero drains the node) unless --strict.
#include "cli/slurm_hook_command.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collect/slurm/job_record.h"
#include "core/file_util.h"
#include "testutil/testutil.h"

namespace ithbat::cli {
namespace {

namespace fs = std::filesystem;
using ::ithbat::testing::TempDir;
using ::testing::HasSubstr;

struct Run {
  int rc = -1;
  std::string err;
};

Run Hook(std::vector<std::string> args, const std::map<std::string, std::string>& env) {
  std::vector<const char*> argv = {"slurm-hook"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::FILE* err = std::tmpfile();
  Run r;
  r.rc = RunSlurmHookCommand(
      static_cast<int>(argv.size()), argv.data(),
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      err);
  std::rewind(err);
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof buf, err);
  r.err.assign(buf, n);
  std::fclose(err);
  return r;
}

std::vector<fs::path> Records(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

TEST(SlurmHookCommand, EpilogWritesTheEndWithItsExitCode) {
  TempDir tmp;
  const fs::path spool = tmp.path() / "spool";
  auto r = Hook({"epilog", "--spool-dir", spool.string()},
                {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_USER", "bob"}, {"SLURM_JOB_EXIT_CODE2", "1:0"}});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto files = Records(spool);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0].filename().string(), ::testing::EndsWith("-7-end.json"));
  auto text = ReadFileBounded(files[0], 1 << 16);
  ASSERT_TRUE(text);
  auto rec = collect::ParseRecord(*text);
  ASSERT_TRUE(rec) << rec.error().message;
  EXPECT_EQ(rec->exit_code, 1);
  EXPECT_EQ(rec->user, "bob");
}

TEST(SlurmHookCommand, TheEventComesFromSlurmsScriptContextWhenNotGiven) {
  TempDir tmp;
  const fs::path spool = tmp.path() / "spool";
  auto r = Hook({"--spool-dir", spool.string()},
                {{"SLURM_JOB_ID", "8"}, {"SLURM_SCRIPT_CONTEXT", "prolog_slurmd"}});
  EXPECT_EQ(r.rc, 0) << r.err;
  auto files = Records(spool);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0].filename().string(), ::testing::EndsWith("-8-start.json"));
}

TEST(SlurmHookCommand, ItsOwnErrorsNeverFailTheJobUnlessStrict) {
  TempDir tmp;
  const fs::path spool = tmp.path() / "spool";
  // No job id (run by hand), an unknown flag, an unknown event, no context: reported, exit 0.
  for (const auto& args : std::vector<std::vector<std::string>>{{"prolog", "--spool-dir", spool.string()},
                                                                {"prolog", "--no-such-flag"},
                                                                {"begin"},
                                                                {"--spool-dir", spool.string()}}) {
    auto r = Hook(args, {});
    EXPECT_EQ(r.rc, 0) << args[0];
    EXPECT_THAT(r.err, HasSubstr("ithbat slurm-hook:")) << args[0];
    EXPECT_THAT(r.err, HasSubstr("the job goes on")) << args[0];
  }
  EXPECT_TRUE(Records(spool).empty());
  EXPECT_EQ(Hook({"prolog", "--strict", "--spool-dir", spool.string()}, {}).rc, 1);
  EXPECT_EQ(Hook({"--strict", "--no-such-flag"}, {}).rc, 1);
  // A spool that cannot be created (a file in the way).
  tmp.WriteFile("file", "x");
  auto r = Hook({"prolog", "--spool-dir", (tmp.path() / "file" / "spool").string()}, {{"SLURM_JOB_ID", "9"}});
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("create"));
}

}  // namespace
}  // namespace ithbat::cli
