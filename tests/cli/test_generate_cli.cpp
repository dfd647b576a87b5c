// `weft generate` as a user runs it: text from a checkpoint trained here, and each bad input a
// one-line error with status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>
#include <memory>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "weft/autograd/grad_mode.h"
#include "weft/infer/load.h"
#include "weft/io/safetensors.h"
#include "weft/quant/ptq.h"
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

// weft quantize on a GPT: its projections weight-only int8 or int4, written with its tokenizer into
// a directory that weft generate takes; loaded back, the model computes exactly what the f32 model
// quantized in memory computes.
TEST_F(GenerateCli, QuantizedGptsGenerateWithTheirOwnTokenizer) {
  const Tensor tokens = Tensor::from_vector<int64_t>({5, 9, 2, 7, 1, 3}, {1, 6});
  for (const auto& [flags, scheme, bits] :
       {std::tuple{"--int8", "int8-weight-only", 8}, std::tuple{"--int4 --group-size 8", "int4-weight-only", 4}}) {
    for (const std::string& source : {checkpoint(), sentencepiece_checkpoint()}) {
      SCOPED_TRACE(str(flags, " ", source));
      const std::string out = dir_->file(str("q", bits, source == checkpoint() ? "_byte" : "_sp"));
      Outcome q = weft_cli(str("quantize ", source, " ", flags, " --out ", out, " --json"));
      ASSERT_EQ(q.status, 0) << q.output;
      nlohmann::json result = last_line_json(q.output);
      EXPECT_EQ(result["quantization"], scheme);
      EXPECT_LT(result["quantized_bytes"].get<int64_t>(), result["f32_bytes"].get<int64_t>());
      EXPECT_TRUE(contains(q.output, "quantized gpt to " + std::string(scheme) + ": 4 Linear layers")) << q.output;
      Outcome g = weft_cli("generate --checkpoint " + out + " --threads 1 --prompt 'line 7 of' --max-tokens 5 "
                           "--temperature 0 --json");
      ASSERT_EQ(g.status, 0) << g.output;
      EXPECT_TRUE(last_line_json(g.output)["text"].get<std::string>().starts_with("line 7 of")) << g.output;

      infer::LoadedModel f32 = infer::load_model(source), loaded = infer::load_model(out);
      EXPECT_EQ(loaded.scheme, scheme);
      EXPECT_EQ(loaded.tokenizer->identity(), f32.tokenizer->identity());
      quant::quantize_linear_weights(*f32.gpt, bits, 8);
      NoGradGuard no_grad;
      EXPECT_EQ((*loaded.gpt)(tokens).to_vector<float>(), (*f32.gpt)(tokens).to_vector<float>());
    }
  }
}

TEST_F(GenerateCli, QuantizingAGptRefusesWhatDoesNotApplyAndLoadingRefusesABrokenFile) {
  const std::string q8 = dir_->file("refusals_q8");
  ASSERT_EQ(weft_cli("quantize " + checkpoint() + " --int8 --out " + q8).status, 0);
  expect_usage_error(weft_cli("quantize " + checkpoint() + " --int8 --dynamic --out " + dir_->file("x")),
                     "--dynamic: not for a GPT, whose int8 and int4 are weight-only");
  expect_usage_error(weft_cli("quantize " + checkpoint() + " --int8 --calib 2 --out " + dir_->file("x")),
                     "--calib: not for a GPT");
  expect_usage_error(weft_cli("quantize " + q8 + " --int4 --out " + dir_->file("x")), "is already quantized (int8-weight-only)");
  expect_usage_error(weft_cli("quantize " + checkpoint() + " --int8 --out " + q8), "exists already; pass --overwrite");
  expect_usage_error(weft_cli("quantize " + checkpoint() + " --int8 --out " + dir_->file("text.txt")),
                     "the directory to write model.safetensors and its tokenizer into; this is a file");
  EXPECT_FALSE(std::filesystem::exists(dir_->file("x")));

  // The same tensors under a classifier's scheme, and the file without one of its scales.
  io::SafetensorsFile file = io::load_safetensors(q8 + "/model.safetensors");
  std::map<std::string, std::string> metadata = file.metadata;
  metadata.erase("weft.checksum");
  metadata["weft.quantization"] = "int8-static";
  std::filesystem::create_directory(dir_->file("static"));
  io::save_safetensors(dir_->file("static/model.safetensors"), {file.tensors.begin(), file.tensors.end()}, metadata);
  expect_usage_error(weft_cli("generate --checkpoint " + dir_->file("static") + " --prompt hi"),
                     "weft.quantization 'int8-static' is a classifier's; a GPT's is int8-weight-only or int4-weight-only");
  metadata["weft.quantization"] = "int8-weight-only";
  std::vector<std::pair<std::string, Tensor>> without;
  for (const auto& [name, t] : file.tensors)
    if (name != "h.0.mlp.c_fc.weight_scale") without.emplace_back(name, t);
  std::filesystem::create_directory(dir_->file("incomplete"));
  io::save_safetensors(dir_->file("incomplete/model.safetensors"), without, metadata);
  expect_usage_error(weft_cli("generate --checkpoint " + dir_->file("incomplete") + " --prompt hi"),
                     "it has no 'h.0.mlp.c_fc.weight_scale' (the model's is f32 [64])");
}

}  // namespace
}  // namespace weft::testing
