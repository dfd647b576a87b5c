// The statuses weft processes publish for `weft smi`: written while the publisher lives, removed
// after, and a file left by a process that no longer runs (or by an earlier owner of a recycled
// pid) skipped and removed by readers.
#include "weft/monitor/status_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "weft/core/error.h"

using namespace weft;
namespace fs = std::filesystem;

namespace {

class StatusFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_status_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    setenv("WEFT_SMI_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("WEFT_SMI_DIR");
    fs::remove_all(dir_);
  }
  void write_status(const monitor::ProcessStatus& s) const {
    std::ofstream(dir_ / (std::to_string(s.pid) + ".json")) << s.to_json().dump();
  }
  fs::path dir_;
};

monitor::ProcessStatus status_of_this_process() {
  monitor::ProcessStatus s;
  s.pid = getpid();
  s.proc_start_ticks = monitor::process_start_ticks(s.pid).value();
  s.command = "train";
  s.model = "mlp";
  s.progress_name = "step";
  return s;
}

// The pid of a child that has exited and been reaped: no process has it now.
int64_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST_F(StatusFileTest, DirectoryComesFromTheEnvironment) { EXPECT_EQ(monitor::status_directory(), dir_.string()); }

TEST_F(StatusFileTest, ALiveProcessIsListedAndStaleOnesAreSkippedAndRemoved) {
  const monitor::ProcessStatus live = status_of_this_process();
  write_status(live);

  monitor::ProcessStatus gone = live;
  gone.pid = dead_pid();
  write_status(gone);

  // A running process's pid (the parent's) with a start time it does not have: what a file left
  // by an earlier owner of a recycled pid looks like.
  monitor::ProcessStatus recycled = live;
  recycled.pid = getppid();
  recycled.proc_start_ticks = monitor::process_start_ticks(recycled.pid).value() + 1;
  write_status(recycled);

  std::ofstream(dir_ / "12.json") << "{not json";

  const std::vector<monitor::ProcessStatus> listed = monitor::read_statuses(dir_.string());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].pid, live.pid);
  EXPECT_EQ(listed[0].model, "mlp");
  EXPECT_TRUE(fs::exists(dir_ / (std::to_string(live.pid) + ".json")));
  EXPECT_FALSE(fs::exists(dir_ / (std::to_string(gone.pid) + ".json")));
  EXPECT_FALSE(fs::exists(dir_ / (std::to_string(recycled.pid) + ".json")));
}

TEST_F(StatusFileTest, AZombieIsNotAlive) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  // Exited but not reaped: /proc still has it, in state Z.
  for (int i = 0; i < 200 && monitor::process_start_ticks(child); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(monitor::process_start_ticks(child).has_value());
  EXPECT_TRUE(fs::exists("/proc/" + std::to_string(child)));
  waitpid(child, nullptr, 0);
}

TEST_F(StatusFileTest, APublisherWritesItsProgressAndRemovesItsFile) {
  std::string path;
  {
    const monitor::StatusPublisher publisher("train", "cnn", "step");
    path = publisher.path();
    EXPECT_EQ(path, (dir_ / (std::to_string(getpid()) + ".json")).string());
    monitor::report_progress(7);
    // Rewritten about once a second.
    std::vector<monitor::ProcessStatus> listed;
    for (int i = 0; i < 30; ++i) {
      listed = monitor::read_statuses(dir_.string());
      if (listed.size() == 1 && listed[0].progress == 7) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].command, "train");
    EXPECT_EQ(listed[0].model, "cnn");
    EXPECT_EQ(listed[0].progress, 7);
    EXPECT_GT(listed[0].rss_bytes, 0);
    EXPECT_GE(listed[0].updated_unix_s, listed[0].started_unix_s);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(monitor::read_statuses(dir_.string()).empty());
}

TEST_F(StatusFileTest, RemovingThePublishedStatusStopsItsWrites) {
  const monitor::StatusPublisher publisher("serve", "mlp", "requests");
  monitor::remove_published_status();
  EXPECT_FALSE(fs::exists(publisher.path()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_FALSE(fs::exists(publisher.path()));
}

TEST(StatusJson, AStatusWithoutItsFieldsIsAFormatError) {
  EXPECT_THROW(monitor::ProcessStatus::from_json({{"pid", 1}}), FormatError);
  const monitor::ProcessStatus s = status_of_this_process();
  EXPECT_EQ(monitor::ProcessStatus::from_json(s.to_json()).to_json(), s.to_json());
}

}  // namespace
