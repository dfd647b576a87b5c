// The statuses weft processes publish for `weft smi`: written while the publisher lives, removed
// after, and a file left by a process that no longer runs (or by an earlier owner of a recycled
// pid) skipped and removed by readers. Written only into a private directory, never through a
// planted symlink; read as untrusted input.
#include "weft/monitor/status_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "monitor/status_of_this_process.h"
#include "temp_dir.h"
#include "weft/core/error.h"

using namespace weft;
namespace fs = std::filesystem;

namespace {

class StatusFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_status_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all);
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

using weft::testing::status_of_this_process;

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

TEST_F(StatusFileTest, APublisherCreatesItsDirectoryAndFilePrivate) {
  const fs::path fresh = dir_ / "fresh";
  setenv("WEFT_SMI_DIR", fresh.c_str(), 1);
  const monitor::StatusPublisher publisher("train", "mlp", "step");
  struct stat directory, file;
  ASSERT_EQ(::stat(fresh.c_str(), &directory), 0);
  ASSERT_EQ(::stat(publisher.path().c_str(), &file), 0);
  EXPECT_EQ(directory.st_mode & 0777, 0700u);
  EXPECT_EQ(file.st_mode & 0777, 0600u);
}

// As weft made it before it was private: nobody else could write there, so it is made private.
TEST_F(StatusFileTest, AnEarlierDirectoryOthersCouldOnlyReadIsMadePrivate) {
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);  // 0755
  EXPECT_TRUE(monitor::why_not_private(dir_.string()).has_value());
  const monitor::StatusPublisher publisher("train", "mlp", "step");
  EXPECT_FALSE(publisher.path().empty());
  EXPECT_EQ(fs::status(dir_).permissions(), fs::perms::owner_all);
}

TEST_F(StatusFileTest, ADirectoryOthersCanWriteIsNeitherWrittenNorRead) {
  fs::permissions(dir_, fs::perms::all);  // 0777
  {
    const monitor::StatusPublisher publisher("train", "mlp", "step");
    EXPECT_TRUE(publisher.path().empty());
    EXPECT_TRUE(fs::is_empty(dir_));
  }
  write_status(status_of_this_process());
  std::vector<std::string> skipped;
  EXPECT_TRUE(monitor::read_statuses(dir_.string(), &skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("has mode 777"), std::string::npos) << skipped[0];
  // A symlink to a private directory is no private directory: whoever owns the link's directory
  // could point it elsewhere.
  weft::testing::TempDir elsewhere;
  const fs::path link = elsewhere.file("link");
  fs::permissions(dir_, fs::perms::owner_all);
  fs::create_directory_symlink(dir_, link);
  EXPECT_TRUE(monitor::why_not_private(link.string()).has_value());
  EXPECT_FALSE(monitor::why_not_private(dir_.string()).has_value());
}

TEST_F(StatusFileTest, APlantedSymlinkAtTheTemporaryNameIsNotFollowed) {
  weft::testing::TempDir elsewhere;
  const std::string victim = elsewhere.file("victim");
  std::ofstream(victim) << "precious";
  const fs::path temporary = dir_ / (std::to_string(getpid()) + ".json.tmp");
  fs::create_symlink(victim, temporary);
  {
    const monitor::StatusPublisher publisher("train", "mlp", "step");
    ASSERT_FALSE(publisher.path().empty());
    ASSERT_EQ(monitor::read_statuses(dir_.string()).size(), 1u);  // the constructor writes once
  }
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  EXPECT_FALSE(fs::exists(fs::symlink_status(temporary)));
}

// Whatever is in the directory, the reader returns at once, lists only a live weft process of
// this user's, and says what it skipped.
TEST_F(StatusFileTest, HostileFilesAreSkippedPromptlyWithANote) {
  const auto start = std::chrono::steady_clock::now();
  const std::string mine = (dir_ / (std::to_string(getpid()) + ".json")).string();
  ASSERT_EQ(::mkfifo((dir_ / "x.json").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(mine.c_str(), 0600), 0);
  std::vector<std::string> skipped;
  EXPECT_TRUE(monitor::read_statuses(dir_.string(), &skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);  // x.json is not a pid's name and is not opened at all
  EXPECT_NE(skipped[0].find("found a FIFO"), std::string::npos) << skipped[0];
  fs::remove(mine);

  std::ofstream(mine) << std::string(40 << 20, '[');
  skipped.clear();
  EXPECT_TRUE(monitor::read_statuses(dir_.string(), &skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("more than the 65536 bytes"), std::string::npos) << skipped[0];
  fs::remove(mine);

  weft::testing::TempDir elsewhere;
  std::ofstream(elsewhere.file("status.json")) << status_of_this_process().to_json().dump();
  fs::create_symlink(elsewhere.file("status.json"), mine);
  skipped.clear();
  EXPECT_TRUE(monitor::read_statuses(dir_.string(), &skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("found a symlink"), std::string::npos) << skipped[0];
  fs::remove(mine);

  const auto with = [](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = status_of_this_process().to_json();
    j[key] = value;
    return j;
  };
  for (const nlohmann::json& bad : {with("started_unix_s", -1e308), with("updated_unix_s", nullptr),
                                    with("rss_bytes", -(int64_t{8} << 50)), with("progress", 1e300),
                                    with("model", std::string(2000, 'm')), with("pid", getppid())}) {
    std::ofstream(mine) << bad.dump();
    skipped.clear();
    EXPECT_TRUE(monitor::read_statuses(dir_.string(), &skipped).empty()) << bad.dump();
    EXPECT_EQ(skipped.size(), 1u) << bad.dump();
    fs::remove(mine);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// /proc/<pid>/stat is world-readable, so a file can claim any process with its true start time;
// the process must also be this user's and run weft.
TEST_F(StatusFileTest, AClaimOnAnotherProgramsProcessIsNotListed) {
  monitor::ProcessStatus init = status_of_this_process();
  init.pid = 1;
  init.proc_start_ticks = monitor::process_start_ticks(1).value();
  init.started_unix_s = init.updated_unix_s;  // after pid 1 began
  write_status(init);
  EXPECT_FALSE(monitor::is_alive(init));
  EXPECT_TRUE(monitor::read_statuses(dir_.string()).empty());
  EXPECT_TRUE(monitor::is_alive(status_of_this_process()));  // weft_tests counts as weft
  monitor::ProcessStatus early = status_of_this_process();
  early.started_unix_s = 1;  // before this process began
  EXPECT_FALSE(monitor::is_alive(early));
}

TEST(StatusJson, AStatusWithoutItsFieldsIsAFormatError) {
  EXPECT_THROW(monitor::ProcessStatus::from_json({{"pid", 1}}), FormatError);
  const monitor::ProcessStatus s = status_of_this_process();
  EXPECT_EQ(monitor::ProcessStatus::from_json(s.to_json()).to_json(), s.to_json());
}

}  // namespace
