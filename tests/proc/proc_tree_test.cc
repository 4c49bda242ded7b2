// /proc reads of the job-output collector: launcher detection on command lines, and the real
// /proc of this machine (parent, children, command line, open TensorBoard files).
#include "collect/proc/proc_tree.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "testutil/testutil.h"

namespace ithbat::collect::proc {
namespace {

TEST(ProcTree, LaunchersAreRecognisedByTheirCommandLine) {
  using V = std::vector<std::string>;
  EXPECT_TRUE(IsLauncher(V{"/usr/local/bin/torchrun", "--nproc-per-node=8", "train.py"}));
  EXPECT_TRUE(IsLauncher(V{"/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=2", "train.py"}));
  EXPECT_TRUE(IsLauncher(V{"python", "-u", "-m", "torch.distributed.run", "--nproc_per_node", "8", "t.py"}));
  EXPECT_TRUE(IsLauncher(V{"python3.11", "-m", "torch.distributed.launch", "t.py"}));
  EXPECT_TRUE(IsLauncher(V{"deepspeed", "--num_gpus", "8", "train.py"}));
  EXPECT_TRUE(IsLauncher(V{"/opt/conda/bin/accelerate", "launch", "train.py"}));
  EXPECT_FALSE(IsLauncher(V{"python", "train.py", "--launcher", "torchrun"}));
  EXPECT_FALSE(IsLauncher(V{"python", "-m", "torch.distributed.elastic.agent"}));
  EXPECT_FALSE(IsLauncher(V{"/bin/bash", "run.sh"}));
  EXPECT_FALSE(IsLauncher(V{}));
  EXPECT_EQ(JoinArgv(V{"python", "-m", "x"}), "python -m x");
}

TEST(ProcTree, RealProcParentChildrenAndCommandLine) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  EXPECT_EQ(ReadPpid("/proc", child).value_or(-1), getpid());
  auto children = ReadChildren("/proc", getpid(), 1000);
  EXPECT_NE(std::find(children.begin(), children.end(), child), children.end())
      << "needs CONFIG_PROC_CHILDREN (/proc/<pid>/task/<tid>/children)";
  EXPECT_FALSE(ReadArgv("/proc", getpid()).empty());
  EXPECT_TRUE(ProcessExists("/proc", child));
  EXPECT_EQ(ProcessUid("/proc", getpid()).value_or(~0u), static_cast<uint32_t>(getuid()));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(ProcessExists("/proc", child));
  EXPECT_TRUE(ReadArgv("/proc", child).empty());
  EXPECT_FALSE(ReadPpid("/proc", child).has_value());
}

TEST(ProcTree, OpenTensorBoardFilesAreFoundAmongTheFds) {
  testing::TempDir dir;
  const auto tb = dir.path() / "events.out.tfevents.1764474698.node-17.4242.0";
  const auto other = dir.path() / "train.log";
  int fd1 = open(tb.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  int fd2 = open(other.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd1, 0);
  ASSERT_GE(fd2, 0);
  auto found = FindTfeventsFiles("/proc", getpid(), 4096);
  close(fd1);
  close(fd2);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].path, tb.string());
  EXPECT_EQ(found[0].fd, fd1);
}

// The file is opened through the process's fd, not its path: what the path names now (another
// file, a symlink) does not matter. A FIFO the process holds is refused without being opened,
// so an agent reading it cannot hang.
TEST(ProcTree, OpenProcessFileOpensTheHeldFileAndRefusesAFifo) {
  testing::TempDir dir;
  const auto tb = dir.path() / "events.out.tfevents.1.host.1.0";
  int held = open(tb.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ASSERT_GE(held, 0);
  ASSERT_EQ(write(held, "abc", 3), 3);
  // The path now names another file: the held one is still what is opened.
  const auto other = dir.path() / "other";
  int o = open(other.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(o, 0);
  ASSERT_EQ(write(o, "zzzzzz", 6), 6);
  close(o);
  std::filesystem::rename(other, tb);
  auto fd = OpenProcessFile("/proc", getpid(), held);
  ASSERT_TRUE(fd) << fd.error().ToString();
  struct stat a {}, b {};
  ASSERT_EQ(fstat(*fd, &a), 0);
  ASSERT_EQ(fstat(held, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_size, 3);
  close(*fd);
  close(held);

  const auto fifo = dir.path() / "events.out.tfevents.2.host.1.0";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int rd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(rd, 0);
  auto found = FindTfeventsFiles("/proc", getpid(), 4096);
  ASSERT_EQ(found.size(), 1u);  // found by name...
  auto refused = OpenProcessFile("/proc", getpid(), found[0].fd);
  ASSERT_FALSE(refused);  // ...but not opened
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  close(rd);
  EXPECT_FALSE(OpenProcessFile("/proc", getpid(), 1 << 20));
}

}  // namespace
}  // namespace ithbat::collect::proc
