// Every file a command writes is a regular file it may replace: a FIFO, a device node, a
// directory, a symlink to one of those, a directory of another user's or one of the command's own
// inputs is refused with one line, before any work and before a byte is written; an existing file
// is replaced only with --overwrite (quantize, ckpt consolidate).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "weft/io/atomic_file.h"
#include "weft/io/dir_lock.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft_cli.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::expect_usage_error;
using testing::Outcome;
using testing::weft_cli;

std::string content(const std::string& path) { return io::read_file(path); }

class OutFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkfifo(dir_.file("fifo").c_str(), 0600), 0);
    fs::create_symlink(dir_.file("fifo"), dir_.file("to-fifo"));
  }
  // Refused with `why`, promptly (a FIFO opened for writing would wait for a reader forever).
  void expect_refused(const std::string& args, const std::string& out, const std::string& why) const {
    const auto start = std::chrono::steady_clock::now();
    expect_usage_error(weft_cli(args), "weft: --out " + out + ": " + why);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << args;
  }
  weft::testing::TempDir dir_;
};

TEST_F(OutFiles, QuantizeWritesOnlyARegularFileItMayReplace) {
  const std::string model = dir_.file("mlp.safetensors");
  auto mlp = nn::make_image_classifier(nn::ModelKind::mlp);
  nn::StateDict state = mlp->state_dict();
  io::save_safetensors(model, {state.begin(), state.end()}, {{"format", "pt"}, {"weft.model", "mlp"}});
  fs::create_hard_link(model, dir_.file("same-model"));
  const std::string quantize = "quantize " + model + " --int4 --out ";
  const std::string only_regular = "weft writes only regular files";
  expect_refused(quantize + dir_.file("fifo"), dir_.file("fifo"), "is a FIFO; " + only_regular);
  expect_refused(quantize + dir_.file("to-fifo"), dir_.file("to-fifo"), "is a symlink to a FIFO; " + only_regular);
  expect_refused(quantize + "/dev/null", "/dev/null", "is a character device; " + only_regular);
  expect_refused(quantize + dir_.path(), dir_.path(), "is a directory; " + only_regular);
  const std::string reads = "is a file this command reads; write to another path";
  expect_refused(quantize + model, model, reads);
  expect_refused(quantize + dir_.file("same-model"), dir_.file("same-model"), reads);
  struct stat null;
  ASSERT_EQ(::stat("/dev/null", &null), 0);
  EXPECT_TRUE(S_ISCHR(null.st_mode));
  EXPECT_EQ(io::load_safetensors(model).tensors.size(), state.size());

  const std::string out = dir_.file("q4.safetensors");
  std::ofstream(out) << "an earlier file";
  expect_refused(quantize + out, out, "exists already; pass --overwrite to replace it");
  EXPECT_EQ(content(out), "an earlier file");
  const Outcome replaced = weft_cli(quantize + out + " --overwrite");
  ASSERT_EQ(replaced.status, 0) << replaced.output;
  EXPECT_EQ(io::read_safetensors_header(out).metadata.at("weft.model"), "mlp");
}

TEST_F(OutFiles, ConsolidateNeverWritesOverItsOwnShards) {
  fs::create_directory(dir_.file("run"));
  const std::string shard = dir_.file("run/model.rank-0.safetensors");
  std::ofstream(shard) << "a shard";
  expect_refused("ckpt consolidate " + dir_.file("run") + " --out " + shard, shard,
                 "is a file this command reads; write to another path");
  expect_refused("ckpt consolidate " + dir_.file("run") + " --out " + dir_.file("fifo"), dir_.file("fifo"),
                 "is a FIFO; weft writes only regular files");
  EXPECT_EQ(content(shard), "a shard");
}

TEST_F(OutFiles, TokenizeAndProfileRefuseWhatIsNoRegularFile) {
  const std::string text = dir_.file("text.txt");
  std::ofstream(text) << "one fortune\n%\nanother fortune\n";
  expect_refused("tokenize train --vocab 300 " + text + " --out " + dir_.file("fifo"), dir_.file("fifo"),
                 "is a FIFO; weft writes only regular files");
  // The text to encode where a shard would go.
  fs::create_directory(dir_.file("shards"));
  const std::string shard = dir_.file("shards/train.bin");
  std::ofstream(shard) << "one fortune\n%\nanother fortune\n";
  expect_refused("tokenize encode " + shard + " --tokenizer byte --out " + dir_.file("shards"), shard,
                 "is a file this command reads; write to another path");
  EXPECT_EQ(content(shard), "one fortune\n%\nanother fortune\n");
  expect_refused("train --model mlp --epochs 1 --limit-train-batches 1 --out " + dir_.file("to-fifo"), dir_.file("to-fifo"),
                 "is a FIFO, not a directory");
  expect_usage_error(weft_cli("train --model mlp --epochs 1 --limit-train-batches 1 --profile " + dir_.file("to-fifo")),
                     "weft: --profile " + dir_.file("to-fifo") + ": is a symlink to a FIFO; weft writes only regular files");
}

// The run's lock file is truncated and written: a symlink planted there is not followed.
TEST_F(OutFiles, TrainNeverWritesThroughASymlinkAtItsLockFile) {
  fs::create_directory(dir_.file("run"));
  std::ofstream(dir_.file("victim")) << "precious";
  fs::create_symlink(dir_.file("victim"), dir_.file(std::string("run/") + io::DirectoryLock::kFileName));
  expect_usage_error(weft_cli("train --model mlp --epochs 1 --limit-train-batches 1 --out " + dir_.file("run")),
                     "weft: cannot lock " + dir_.file("run") + ": " + dir_.file(std::string("run/") + io::DirectoryLock::kFileName) + " is a symlink");
  EXPECT_EQ(content(dir_.file("victim")), "precious");
}

TEST_F(OutFiles, TrainRefusesAnOutDirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  fs::create_directory(dir_.file("theirs"));
  ASSERT_EQ(::chown(dir_.file("theirs").c_str(), 65534, 65534), 0);
  expect_usage_error(weft_cli("train --model mlp --epochs 1 --limit-train-batches 1 --out " + dir_.file("theirs")),
                     "weft: --out " + dir_.file("theirs") + ": the directory " + dir_.file("theirs") +
                         " belongs to another user (uid 65534)");
  EXPECT_TRUE(fs::is_empty(dir_.file("theirs")));
}

}  // namespace
}  // namespace weft
