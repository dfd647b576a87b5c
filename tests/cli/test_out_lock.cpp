// One run per output directory: a second `weft train` on a directory in use is refused naming
// the holder, and a holder killed with SIGKILL leaves nothing stuck.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/io/dir_lock.h"
#include "weft_cli.h"

extern char** environ;

namespace weft::testing {
namespace {

std::string lock_text(const std::string& dir) {
  std::ifstream in(dir + "/" + io::DirectoryLock::kFileName);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST(OutLock, ASecondRunIsRefusedAndAKilledOneLeavesNothingStuck) {
  TempDir dir;
  const std::string out = dir.file("run");
  // A long run: the lock is taken before the data is read, so it holds well before training.
  std::vector<std::string> args = {WEFT_CLI_PATH, "train", "--model", "mlp", "--epochs", "50", "--threads", "1",
                                   "--out", out};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t first = 0;
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  ASSERT_EQ(posix_spawn(&first, argv[0], &quiet, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&quiet);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(lock_text(out), std::to_string(first)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(contains(lock_text(out), std::to_string(first))) << lock_text(out);

  expect_usage_error(weft_cli("train --model cnn --out " + out),
                     "is in use by process " + std::to_string(first) + " (weft train --model mlp)");
  EXPECT_THROW(io::DirectoryLock(out, "a test"), ValueError);

  kill(first, SIGKILL);
  int status = 0;
  waitpid(first, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  io::DirectoryLock mine(out, "a test");  // the kernel released the dead run's lock
  EXPECT_TRUE(contains(lock_text(out), "(a test)"));
}

}  // namespace
}  // namespace weft::testing
