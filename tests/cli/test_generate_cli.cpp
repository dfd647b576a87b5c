// `weft generate` as a user runs it: text from a checkpoint trained here, and each bad input a
// one-line error with status 2.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

// One tiny byte-level GPT (context 32) and one with a SentencePiece tokenizer, trained once for
// every test.
class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    {
      std::ofstream text(dir_->file("text.txt"));
      for (int i = 0; i < 100; ++i) text << "line " << i << " of a small corpus about the sea and the sky\n%\n";
    }
    const std::string common = " --layers 1 --heads 2 --dim 16 --context 32 --batch-size 4 --steps 2 --threads 1 --data " +
                               dir_->file("text.txt");
    Outcome byte = weft_cli("train --model gpt" + common + " --out " + checkpoint());
    ASSERT_EQ(byte.status, 0) << byte.output;
    Outcome tokenizer = weft_cli("tokenize train --vocab 300 " + dir_->file("text.txt") + " --out " + tokenizer_file());
    ASSERT_EQ(tokenizer.status, 0) << tokenizer.output;
    Outcome pieces = weft_cli("train --model gpt" + common + " --tokenizer " + tokenizer_file() + " --out " +
                              sentencepiece_checkpoint());
    ASSERT_EQ(pieces.status, 0) << pieces.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string checkpoint() { return dir_->file("byte_run"); }
  static std::string sentencepiece_checkpoint() { return dir_->file("sp_run"); }
  static std::string tokenizer_file() { return dir_->file("tok.model"); }
  static Outcome generate(const std::string& flags) {
    return weft_cli("generate --checkpoint " + checkpoint() + " --threads 1 " + flags);
  }

  static TempDir* dir_;
};

TempDir* GenerateCli::dir_ = nullptr;

TEST_F(GenerateCli, PrintsThePromptAndItsContinuation) {
  Outcome o = generate("--prompt 'line 7 of' --max-tokens 10 --seed 3 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(o.output.starts_with("line 7 of")) << o.output;
  EXPECT_TRUE(contains(o.output, "10 tokens after a prompt of 9 in ")) << o.output;
  EXPECT_TRUE(contains(o.output, " tokens/s (context 32")) << o.output;
  nlohmann::json result = last_line_json(o.output);
  EXPECT_EQ(result["prompt_tokens"], 9);
  EXPECT_EQ(result["generated_tokens"], 10);
  EXPECT_GT(result["tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(result["text"].get<std::string>().starts_with("line 7 of")) << result;
}

TEST_F(GenerateCli, TheSameSeedGivesTheSameText) {
  auto text = [](int seed) {
    Outcome o = generate("--prompt 'the sea' --max-tokens 20 --temperature 1.5 --json --seed " + std::to_string(seed));
    EXPECT_EQ(o.status, 0) << o.output;
    return last_line_json(o.output)["text"].get<std::string>();
  };
  EXPECT_EQ(text(1), text(1));
  EXPECT_NE(text(1), text(2));
}

TEST_F(GenerateCli, FillsTheContextByDefault) {
  Outcome o = generate("--prompt 'line' --temperature 0 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(last_line_json(o.output)["generated_tokens"], 32 - 4);
}

// What --help says a flag defaults to is what a run without it uses.
TEST_F(GenerateCli, HelpShowsTheDefaultsItUses) {
  const std::string help = weft_cli("generate --help").output;
  EXPECT_EQ(help_default(help, "--max-tokens"), "all that fit");
  Outcome o = generate("--prompt 'line' --json");
  ASSERT_EQ(o.status, 0) << o.output;
  const nlohmann::json result = last_line_json(o.output);
  EXPECT_EQ(result["generated_tokens"], 32 - 4);
  EXPECT_EQ(result["temperature"], std::stod(help_default(help, "--temperature")));
  EXPECT_EQ(result["temperature"], 0.8);
  EXPECT_EQ(result["top_k"], std::stoi(help_default(help, "--top-k")));
  EXPECT_EQ(result["seed"], std::stoi(help_default(help, "--seed")));
}

TEST_F(GenerateCli, UsesTheTokenizerSavedWithTheCheckpoint) {
  Outcome o = weft_cli("generate --checkpoint " + sentencepiece_checkpoint() +
                       " --threads 1 --prompt 'the sea and' --max-tokens 5 --json");
  ASSERT_EQ(o.status, 0) << o.output;
  nlohmann::json result = last_line_json(o.output);
  EXPECT_EQ(result["generated_tokens"], 5);
  EXPECT_LT(result["prompt_tokens"].get<int>(), 11) << "pieces, not bytes";
  EXPECT_TRUE(result["tokenizer"].get<std::string>().starts_with("sentencepiece:")) << result;
}

TEST_F(GenerateCli, RejectsBadInputsWithOneLine) {
  expect_usage_error(generate("--prompt '" + std::string(33, 'a') + "'"),
                     "the prompt is 33 tokens, longer than the model's context of 32 tokens");
  expect_usage_error(generate("--prompt 'line 1' --max-tokens 30"),
                     "the prompt's 6 tokens and 30 generated ones do not fit the model's context of 32 tokens: ask "
                     "for at most --max-tokens 26");
  expect_usage_error(generate("--prompt 'line' --tokenizer " + tokenizer_file()), "does not match the checkpoint");
  expect_usage_error(weft_cli("generate --checkpoint " + sentencepiece_checkpoint() + " --prompt 'x' --tokenizer byte"),
                     "tokenizer byte (byte) does not match the checkpoint");
  expect_usage_error(weft_cli("generate --checkpoint /nonexistent/run --prompt 'line'"), "/nonexistent/run");
  expect_usage_error(generate("--prompt ''"), "--prompt: must not be empty");
  expect_usage_error(generate("--prompt 'line' --temperature -1"), "--temperature: must be a finite non-negative number, got '-1'");
  expect_usage_error(generate("--prompt 'line' --top-k -2"), "--top-k: must be a non-negative whole number, got '-2'");
  expect_usage_error(generate("--prompt 'line' --max-tokens -1"), "--max-tokens: must be a non-negative whole number, got '-1'");
  expect_usage_error(weft_cli("generate --prompt 'line'"), "--checkpoint is required");
}

}  // namespace
}  // namespace weft::testing
