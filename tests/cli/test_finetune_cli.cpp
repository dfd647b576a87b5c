// weft train --init-from CKPT [--freeze REGEX]: a new run that starts from a checkpoint's weights
// (its first loss is the checkpoint model's, far below a fresh model's) and leaves the frozen
// tensors bit for bit as they were, while the others train.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "weft/infer/load.h"
#include "weft_cli.h"

namespace weft {
namespace {

using testing::contains;
using testing::TempDir;
using testing::expect_usage_error;
using testing::Outcome;
using testing::weft_cli;

const std::string kMlp = "train --model mlp --batch-size 32 --threads 1 --log-every 1 ";

double first_loss(const std::string& run) {
  std::ifstream metrics(run + "/metrics.jsonl");
  std::string line;
  std::getline(metrics, line);
  return nlohmann::json::parse(line).at("train/loss").get<double>();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(FinetuneCli, StartsFromTheCheckpointAndLeavesFrozenTensorsAsTheyWere) {
  TempDir dir;
  ASSERT_EQ(weft_cli(kMlp + "--steps 30 --out " + dir.file("base")).status, 0);
  const Outcome tuned = weft_cli(kMlp + "--steps 3 --init-from " + dir.file("base") + " --out " + dir.file("tuned"));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_TRUE(contains(tuned.output, "initialised from " + dir.file("base"))) << tuned.output;
  const Outcome frozen = weft_cli(kMlp + "--steps 3 --init-from " + dir.file("base") + " --freeze '^1\\.' --out " +
                                  dir.file("frozen"));
  ASSERT_EQ(frozen.status, 0) << frozen.output;
  EXPECT_TRUE(contains(frozen.output, "frozen: 2 tensors (1.weight, ...)")) << frozen.output;
  ASSERT_EQ(weft_cli(kMlp + "--steps 3 --out " + dir.file("fresh")).status, 0);

  // The same seed draws the same first batch: both fine-tunings see it with the checkpoint's
  // weights (the loss is taken before the first update), a fresh model with its initialisation.
  EXPECT_EQ(first_loss(dir.file("tuned")), first_loss(dir.file("frozen")));
  EXPECT_LT(first_loss(dir.file("tuned")), first_loss(dir.file("fresh")) - 0.5);

  const nn::StateDict base = infer::load_weights(dir.file("base")).state;
  const nn::StateDict after = infer::load_weights(dir.file("frozen")).state;
  for (const auto& [name, tensor] : base) {
    const bool was_frozen = name.rfind("1.", 0) == 0;
    EXPECT_EQ(same_bits(tensor, after.at(name)), was_frozen) << name;
  }
}

TEST(FinetuneCli, ReinitialisedTensorsStartAfreshAndTheOthersFromTheCheckpoint) {
  TempDir dir;
  ASSERT_EQ(weft_cli(kMlp + "--steps 30 --out " + dir.file("base")).status, 0);
  const Outcome tuned = weft_cli(kMlp + "--steps 3 --init-from " + dir.file("base") + " --reinit '^5\\.' --freeze "
                                 "'^(1|3)\\.' --out " + dir.file("tuned"));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_TRUE(contains(tuned.output, "initialised from " + dir.file("base") + ", all but 2 tensors (5.weight, ...: "
                                     "initialised afresh)")) << tuned.output;
  ASSERT_EQ(weft_cli(kMlp + "--steps 3 --out " + dir.file("fresh")).status, 0);
  // The head is a fresh model's (same seed, same initialisation) and the features the checkpoint's,
  // so the first loss is not the fresh model's.
  EXPECT_NE(first_loss(dir.file("tuned")), first_loss(dir.file("fresh")));
  const nn::StateDict base = infer::load_weights(dir.file("base")).state;
  const nn::StateDict after = infer::load_weights(dir.file("tuned")).state;
  for (const char* kept : {"1.weight", "1.bias", "3.weight", "3.bias"}) EXPECT_TRUE(same_bits(base.at(kept), after.at(kept))) << kept;
  EXPECT_FALSE(same_bits(base.at("5.weight"), after.at("5.weight")));

  expect_usage_error(weft_cli(kMlp + "--steps 1 --reinit '^5\\.'"), "--reinit: chooses which of --init-from's tensors");
  expect_usage_error(weft_cli(kMlp + "--steps 1 --init-from " + dir.file("base") + " --reinit '^head'"),
                     "--reinit '^head' matches none of the model's tensors (1.weight, ...)");
  expect_usage_error(weft_cli(kMlp + "--steps 1 --init-from " + dir.file("base") + " --reinit '('"),
                     "--reinit: '(' is not a regular expression");
}

TEST(FinetuneCli, AGptTakesTheCheckpointsShape) {
  TempDir dir;
  const std::string gpt = "train --model gpt --data random --threads 1 --steps 2 --batch-size 4 ";
  ASSERT_EQ(weft_cli(gpt + "--layers 1 --heads 2 --dim 32 --context 16 --out " + dir.file("base")).status, 0);
  const Outcome tuned = weft_cli(gpt + "--init-from " + dir.file("base") + " --freeze 'wte|wpe' --out " + dir.file("tuned"));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_TRUE(contains(tuned.output, "\"dim\":32")) << tuned.output;
  const nn::StateDict base = infer::load_weights(dir.file("base")).state;
  const nn::StateDict after = infer::load_weights(dir.file("tuned")).state;
  EXPECT_TRUE(same_bits(base.at("wte.weight"), after.at("wte.weight")));
  EXPECT_TRUE(same_bits(base.at("wpe.weight"), after.at("wpe.weight")));
  EXPECT_FALSE(same_bits(base.at("h.0.mlp.c_fc.weight"), after.at("h.0.mlp.c_fc.weight")));
}

TEST(FinetuneCli, WhatCannotBeFineTunedIsRefusedSayingWhy) {
  TempDir dir;
  ASSERT_EQ(weft_cli(kMlp + "--steps 2 --out " + dir.file("base")).status, 0);
  const std::string from = " --init-from " + dir.file("base");
  expect_usage_error(weft_cli(kMlp + "--steps 1" + from + " --resume " + dir.file("base")),
                     "--init-from starts a new run from a checkpoint's weights and --resume continues a run: give one of them");
  expect_usage_error(weft_cli(kMlp + "--steps 1" + from + " --freeze '('"), "--freeze: '(' is not a regular expression");
  expect_usage_error(weft_cli(kMlp + "--steps 1" + from + " --freeze nothing"),
                     "--freeze 'nothing' matches none of the model's parameters (1.weight, ...)");
  expect_usage_error(weft_cli(kMlp + "--steps 1" + from + " --freeze ."),
                     "--freeze '.' matches every one of the model's 6 parameters: nothing would train");
  expect_usage_error(weft_cli("train --model cnn --steps 1 --threads 1" + from),
                     "--init-from " + dir.file("base") + " holds a mlp and this run trains a cnn (--model)");
  expect_usage_error(weft_cli(kMlp + "--steps 1 --init-from " + dir.file("missing")), dir.file("missing"));
}

}  // namespace
}  // namespace weft
