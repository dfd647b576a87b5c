// What a killed write_file_atomic leaves is removed by the next write of the same file; only a
// regular file this command does not read is ever replaced, and the refusal comes before a byte
// is written.
#include "weft/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "temp_dir.h"
#include "weft/core/error.h"

namespace weft::io {
namespace {

namespace fs = std::filesystem;

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// The pid of a process that has exited and been reaped, so no process has it (until reused).
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(AtomicFile, AWriteRemovesTheTemporariesOfKilledWritesOfTheSameFile) {
  testing::TempDir dir;
  const std::string dead = std::to_string(dead_pid()), alive = std::to_string(::getppid());
  for (const std::string& name : {"model.safetensors.tmp." + dead + ".0", "model.safetensors.tmp." + alive + ".3",
                                  "other.safetensors.tmp." + dead + ".0", std::string("model.safetensors.tmp.notes")})
    std::ofstream(dir.file(name)) << "torn";
  write_file_atomic(dir.file("model.safetensors"), [](std::FILE* f) { std::fputs("whole", f); });
  EXPECT_EQ(read_file(dir.file("model.safetensors")), "whole");
  // A live process may be writing the file now; another file's temporaries are its own writes' to clean.
  EXPECT_EQ(entries(dir.path()),
            (std::set<std::string>{"model.safetensors", "model.safetensors.tmp." + alive + ".3",
                                   "other.safetensors.tmp." + dead + ".0", "model.safetensors.tmp.notes"}));
}

void write_whole(const std::string& path) {
  write_file_atomic(path, [](std::FILE* f) { std::fputs("whole", f); });
}

TEST(AtomicFile, OnlyARegularFileIsReplaced) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  fs::create_symlink(dir.file("fifo"), dir.file("to-fifo"));
  fs::create_symlink("/dev/null", dir.file("to-null"));
  fs::create_directory(dir.file("sub"));
  const std::set<std::string> before = entries(dir.path());
  // /dev/null is refused by looking at it: nothing is created beside it or renamed over it.
  for (const std::string& path : {dir.file("fifo"), dir.file("to-fifo"), dir.file("to-null"), dir.file("sub"),
                                  std::string("/dev/null")})
    EXPECT_THROW(write_whole(path), IOError) << path;
  EXPECT_EQ(entries(dir.path()), before);  // and no temporary left
  struct stat null;
  ASSERT_EQ(::stat("/dev/null", &null), 0);
  EXPECT_TRUE(S_ISCHR(null.st_mode));
  EXPECT_EQ(why_not_replaceable(dir.file("to-fifo")), "is a symlink to a FIFO; weft writes only regular files");
  EXPECT_EQ(why_not_replaceable("/dev/null"), "is a character device; weft writes only regular files");

  // A symlink to a regular file is replaced by the new file; its target stays as it was.
  std::ofstream(dir.file("target")) << "kept";
  fs::create_symlink(dir.file("target"), dir.file("to-target"));
  write_whole(dir.file("to-target"));
  EXPECT_FALSE(fs::is_symlink(dir.file("to-target")));
  EXPECT_EQ(read_file(dir.file("to-target")), "whole");
  EXPECT_EQ(read_file(dir.file("target")), "kept");
}

TEST(AtomicFile, AFileThisCommandReadsIsNotReplacedByAnyName) {
  testing::TempDir dir;
  std::ofstream(dir.file("input")) << "input";
  fs::create_hard_link(dir.file("input"), dir.file("hard-link"));
  fs::create_symlink(dir.file("input"), dir.file("symlink"));
  mark_as_input(dir.file("symlink"));
  for (const std::string& path : {dir.file("input"), dir.file("hard-link"), dir.file("symlink"), dir.file("./input")}) {
    EXPECT_EQ(why_not_replaceable(path), "is a file this command reads; write to another path") << path;
    EXPECT_THROW(write_whole(path), IOError) << path;
  }
  EXPECT_EQ(read_file(dir.file("input")), "input");
  write_whole(dir.file("output"));
  EXPECT_EQ(read_file(dir.file("output")), "whole");
}

TEST(AtomicFile, ADirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  testing::TempDir dir;
  ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  EXPECT_THROW(write_whole(dir.file("out")), IOError);
  EXPECT_TRUE(fs::is_empty(dir.path()));
  EXPECT_TRUE(why_not_writable_directory(dir.path())->find("belongs to another user (uid 65534)") != std::string::npos);
}

}  // namespace
}  // namespace weft::io
