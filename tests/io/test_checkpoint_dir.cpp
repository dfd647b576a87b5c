// Checkpoint directories (io/checkpoint_dir.h): a save becomes current whole, through the
// pointer, and a save that fails or is killed at any filesystem operation (io/fault.h) leaves
// the previous checkpoint current and readable; the next save removes what it left.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "../expect_error.h"
#include "../temp_dir.h"
#include "weft/core/error.h"
#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/fault.h"

namespace weft::io {
namespace {

namespace fs = std::filesystem;
using testing::contains;

// A checkpoint of two files, both holding `content`, as two ranks' shards would be.
void save(const std::string& dir, int64_t step, const std::string& content) {
  CheckpointWriter checkpoint(dir, step);
  for (const char* name : {"shard-0", "shard-1"})
    write_file_atomic(checkpoint.staging() + "/" + name, [&](std::FILE* f) { std::fputs(content.c_str(), f); });
  checkpoint.commit();
}

// The current checkpoint's content, after checking that both files hold the same.
std::string current_content(const std::string& dir) {
  const std::string current = current_checkpoint(dir);
  const std::string a = read_file(current + "/shard-0"), b = read_file(current + "/shard-1");
  EXPECT_EQ(a, b) << "a checkpoint mixing two saves in " << current;
  return a;
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

TEST(CheckpointDir, TheCurrentCheckpointIsTheOneThePointerNames) {
  testing::TempDir dir;
  EXPECT_EQ(current_checkpoint(dir.path()), dir.path()) << "a directory without a pointer is its own checkpoint";
  save(dir.path(), 40, "forty");
  EXPECT_EQ(fs::read_symlink(dir.file("latest")), "step-00000040");
  EXPECT_EQ(current_checkpoint(dir.path()), dir.file("step-00000040"));
  EXPECT_EQ(read_file(dir.file("shard-0")), "forty") << "DIR/NAME is a symlink into the current checkpoint";

  std::ofstream(dir.file("metrics.jsonl")) << "{}\n";
  save(dir.path(), 80, "eighty");
  EXPECT_EQ(current_content(dir.path()), "eighty");
  EXPECT_EQ(fs::read_symlink(dir.file("shard-1")), "latest/shard-1");
  EXPECT_EQ(read_file(dir.file("shard-1")), "eighty");
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"latest", "metrics.jsonl", "shard-0", "shard-1", "step-00000080"}));

  save(dir.path(), 80, "eighty again");  // the same step saved twice: a new directory, then the pointer
  EXPECT_EQ(current_content(dir.path()), "eighty again");
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"latest", "metrics.jsonl", "shard-0", "shard-1", "step-00000080-2"}));
}

TEST(CheckpointDir, ThePointerMustNameAStepDirectory) {
  testing::TempDir dir;
  save(dir.path(), 1, "one");
  auto point_to = [&](const std::string& target) {
    fs::remove(dir.file("latest"));
    fs::create_symlink(target, dir.file("latest"));
  };
  point_to("../elsewhere");
  auto refusal = [&] { return testing::message_of<FormatError>([&] { current_checkpoint(dir.path()); }); };
  EXPECT_TRUE(contains(refusal(), "should point to a step directory")) << refusal();
  point_to("step-00000002");
  EXPECT_TRUE(contains(testing::message_of<IOError>([&] { current_checkpoint(dir.path()); }), "is not a directory"));
  fs::remove(dir.file("latest"));
  std::ofstream(dir.file("latest")) << "step-00000001\n";
  EXPECT_TRUE(contains(refusal(), "should be a symlink")) << refusal();
}

TEST(CheckpointDir, StaleTemporariesAndUnnamedStepsAreRemovedByTheNextSave) {
  testing::TempDir dir;
  save(dir.path(), 1, "one");
  fs::create_directories(dir.file(".tmp-step-00000002"));
  std::ofstream(dir.file(".tmp-step-00000002/shard-0.tmp.123.0")) << "torn";
  std::ofstream(dir.file("notes.txt.tmp.4567.3")) << "torn";
  std::ofstream(dir.file(".tmp-latest")) << "torn";
  fs::create_directories(dir.file("step-00000003"));  // renamed into place, killed before the pointer
  save(dir.path(), 4, "four");
  EXPECT_EQ(entries(dir.path()), (std::set<std::string>{"latest", "shard-0", "shard-1", "step-00000004"}));
}

// Saves step 2 over step 1 with the nth operation failing, for every n until a save passes them all.
TEST(CheckpointDir, AFailureAtAnyOperationKeepsAWholeCheckpoint) {
  int64_t n = 1;
  for (;; ++n) {
    testing::TempDir dir;
    save(dir.path(), 1, "one");
    inject_fault_at(n);
    bool failed = false;
    try {
      save(dir.path(), 2, "two");
    } catch (const IOError& e) {
      failed = true;
      EXPECT_TRUE(contains(e.what(), "No space left on device")) << e.what();
    }
    const int64_t seen = fault_points_seen();
    inject_fault_at(0);
    if (!failed) {
      EXPECT_LT(seen, n) << "operation " << n << " was told to fail and the save passed";
      break;
    }
    const std::string content = current_content(dir.path());
    EXPECT_TRUE(content == "one" || content == "two") << "operation " << n << ": " << content;
    EXPECT_EQ(read_file(dir.file("shard-0")), read_file(dir.file("shard-1"))) << "operation " << n;

    save(dir.path(), 3, "three");
    EXPECT_EQ(current_content(dir.path()), "three") << "operation " << n;
    EXPECT_EQ(entries(dir.path()), (std::set<std::string>{"latest", "shard-0", "shard-1", "step-00000003"}))
        << "operation " << n;
  }
  // The staging mkdir; per file, write_file_atomic's create, write, fsync, rename and directory
  // fsync; commit's fsync of each file; the staging directory's fsync, its rename and DIR's
  // fsync; the pointer's symlink, its rename and DIR's fsync.
  EXPECT_EQ(n - 1, 1 + 2 * 5 + 2 + 3 + 3) << "every write, fsync and rename of the save counts";
}

// The same, with the process killed (SIGKILL, as kill -9) at the nth operation: nothing runs after it.
TEST(CheckpointDir, AKillAtAnyOperationKeepsAWholeCheckpoint) {
    int64_t operations = 0;
  {
    testing::TempDir dir;
    save(dir.path(), 1, "one");
    inject_fault_at(0);
    save(dir.path(), 2, "two");
    operations = fault_points_seen();
  }
  ASSERT_EQ(operations, 19);
  for (int64_t n = 1; n <= operations; ++n) {
    testing::TempDir dir;
    save(dir.path(), 1, "one");
    EXPECT_EXIT(
        {
          inject_fault_at(n, FaultMode::kill);
          save(dir.path(), 2, "two");
        },
        ::testing::KilledBySignal(SIGKILL), "injected kill")
        << "operation " << n;
    const std::string content = current_content(dir.path());
    EXPECT_TRUE(content == "one" || content == "two") << "operation " << n << ": " << content;
    save(dir.path(), 3, "three");
    EXPECT_EQ(entries(dir.path()), (std::set<std::string>{"latest", "shard-0", "shard-1", "step-00000003"}))
        << "operation " << n;
  }
}

}  // namespace
}  // namespace weft::io
