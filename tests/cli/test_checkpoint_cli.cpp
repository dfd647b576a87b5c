// `weft train` killed (SIGKILL, as kill -9) at a write, fsync or rename of a checkpoint save:
// `--resume` from what is left finishes with the same weights as a run never killed, and the
// save after the kill removes what the killed one left.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "weft/io/atomic_file.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointCli, AKilledSaveResumesToTheWeightsOfARunNeverKilled) {
  TempDir dir;
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 100; ++i) text << "line " << i << " of a small corpus about the sea\n%\n";
  }
  // Two checkpoints, at steps 2 and 4.
  const std::string train = "train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 4 "
                            "--eval-every 2 --threads 1 --data " + dir.file("text.txt") + " --out ";
  Outcome straight = weft_cli(train + dir.file("straight"));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const std::string expected = io::read_file(dir.file("straight/model.safetensors"));

  int kills = 0;
  for (int n = 1;; n += 4) {
    const std::string out = dir.file("killed-" + std::to_string(n));
    ::setenv("WEFT_FAULT_AT", (std::to_string(n) + ":kill").c_str(), 1);
    Outcome killed = weft_cli(train + out);
    ::unsetenv("WEFT_FAULT_AT");
    if (killed.status == 0) break;  // past the last operation of the last save
    ++kills;
    ASSERT_TRUE(contains(killed.output, "injected kill at operation " + std::to_string(n))) << killed.output;
    // Killed in the first save, there is nothing to resume; after it, there is step 2 or 4.
    const bool resumable = fs::is_symlink(out + "/latest");
    Outcome resumed = weft_cli(train + out + (resumable ? " --resume " + out : ""));
    ASSERT_EQ(resumed.status, 0) << "killed at operation " << n << ": " << resumed.output;
    EXPECT_EQ(io::read_file(out + "/model.safetensors"), expected) << "killed at operation " << n;
    for (const auto& entry : fs::directory_iterator(out)) {
      const std::string name = entry.path().filename().string();
      const bool leftover = name.starts_with(".tmp") || contains(name, ".tmp.") ||
                            (name.starts_with("step-") && name != "step-00000004");
      EXPECT_FALSE(leftover) << "killed at operation " << n << ", left " << name;
    }
  }
  EXPECT_GT(kills, 10) << "both saves' operations are reached";
}

}  // namespace
}  // namespace weft::testing
