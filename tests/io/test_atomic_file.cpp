// What a killed write_file_atomic leaves is removed by the next write of the same file.
#include "weft/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "temp_dir.h"

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

}  // namespace
}  // namespace weft::io
