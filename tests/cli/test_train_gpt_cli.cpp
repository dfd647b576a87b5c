// `weft train --model gpt` as a user runs it: the JSON line, and flags that belong to another model.
#include <gtest/gtest.h>

#include <fstream>

#include "temp_dir.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

TEST(TrainGptCli, PrintsTheResultAsJson) {
  TempDir dir;
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 100; ++i) text << "line " << i << " of a small corpus\n%\n";
  }
  Outcome o = weft_cli("train --model gpt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 3 --threads 1 "
                       "--data " + dir.file("text.txt") + " --out " + dir.file("run") + " --json");
  ASSERT_EQ(o.status, 0) << o.output;
  nlohmann::json result = last_line_json(o.output);
  for (const char* key : {"train_tokens_per_s", "val_loss", "val_bits_per_byte", "params", "wall_s", "peak_allocated_bytes"})
    EXPECT_TRUE(result.contains(key)) << key << " in " << result.dump();
  EXPECT_EQ(result["steps"], 3);
  EXPECT_EQ(result["tokens"], 3 * 4 * 8);
  EXPECT_TRUE(contains(o.output, "weft generate --checkpoint " + dir.file("run"))) << o.output;
}

// The architecture --help says a GPT defaults to is the one a run without those flags builds.
TEST(TrainGptCli, HelpShowsTheArchitectureItBuilds) {
  const std::string help = weft_cli("train --help").output;
  Outcome o = weft_cli("train --model gpt --data random --steps 1 --batch-size 2 --threads 1 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json result = last_line_json(o.output);
  for (const char* flag : {"--layers", "--heads", "--dim", "--context"})
    EXPECT_EQ(std::to_string(result[std::string(flag).substr(2)].get<int64_t>()), help_default(help, flag)) << flag;
  EXPECT_EQ(help_default(help, "--model"), "cnn");
  EXPECT_EQ(result["optimizer"], help_default(help, "--optimizer"));
  EXPECT_EQ(result["precision"], help_default(help, "--precision"));
  EXPECT_EQ(result["schedule"], help_default(help, "--schedule"));
}

TEST(TrainGptCli, RejectsFlagsOfAnotherModel) {
  expect_usage_error(weft_cli("train --model cnn --layers 2"), "--layers: is not a flag of --model cnn");
  expect_usage_error(weft_cli("train --model gpt --dataset mnist"), "--dataset: is not a flag of --model gpt");
  expect_usage_error(weft_cli("train --model cnn --tokenizer byte"), "--tokenizer: is not a flag of --model cnn");
  expect_usage_error(weft_cli("train --model mlp --epochs 0"), "--epochs: must be a number in (0, 1e+12], got '0'");
  expect_usage_error(weft_cli("train --model gpt --steps 0"), "--steps: must be a whole number from 1 to 1000000000000, got '0'");
  expect_usage_error(weft_cli("train --optimizer lion"), "--optimizer: must be one of sgd, momentum (SGD with momentum), adam, adamw, got 'lion'");
  expect_usage_error(weft_cli("train --profile t.json --profile-steps 3"), "--profile-steps: must be FIRST:LAST, two step numbers, got '3'");
  expect_usage_error(weft_cli("train --profile t.json --profile-steps 4:2"), "1 <= FIRST <= LAST <= 1000000000000, got '4:2'");
  expect_usage_error(weft_cli("train --precision int8"), "--precision");
  expect_usage_error(weft_cli("train --model gpt --data /nonexistent/text"), "/nonexistent/text");
}

}  // namespace
}  // namespace weft::testing
