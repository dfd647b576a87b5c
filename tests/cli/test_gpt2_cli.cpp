// `weft import gpt2` and `weft export gpt2` as a user runs them, on a tiny GPT-2 in Hugging
// Face's layout made here (tests/infer/test_huggingface_gpt2.cpp checks the numbers against
// PyTorch): the imported checkpoint generates and trains, and each bad input is one line, status
// 2, with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/gpt2_vocabulary.h"
#include "temp_dir.h"
#include "weft/infer/huggingface_gpt2.h"
#include "weft/io/safetensors.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

// A GPT-2 of 2 layers, dim 16, context 32 and a vocabulary of 256 bytes, 3 merges and
// <|endoftext|>, written into `dir` in Hugging Face's layout.
void write_tiny_gpt2(const std::string& dir) {
  const Merges merges = {{"t", "h"}, {"th", "e"}, {" ", "the"}};
  infer::Gpt2Model model;
  model.config = {.layers = 2, .heads = 2, .dim = 16, .context = 32, .vocab = 260, .dropout = 0};
  nn::GPT gpt(model.config);
  model.weights = gpt.state_dict();
  model.tokenizer = std::make_shared<data::Gpt2Tokenizer>(vocab_json(merges, {"<|endoftext|>"}), merges_txt(merges),
                                                          "vocab.json", "merges.txt");
  infer::write_huggingface_gpt2(model, dir);
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Gpt2Cli : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_gpt2(hf()); }
  std::string hf() const { return dir_.file("hf"); }
  std::string out() const { return dir_.file("imported"); }
  Outcome import(const std::string& flags = "") { return weft_cli("import gpt2 " + hf() + " --out " + out() + flags); }
  // hf()'s model.safetensors with its tensors (name, tensor, in header order) changed by `edit`.
  template <typename Edit>
  void rewrite_weights(Edit&& edit) {
    io::SafetensorsFile file = io::load_safetensors(hf() + "/model.safetensors");
    edit(file.tensors);
    io::save_safetensors(hf() + "/model.safetensors", file.tensors, file.metadata);
  }
  // One line, status 2, and no --out.
  void expect_refused(const std::string& says) {
    expect_usage_error(import(), says);
    EXPECT_FALSE(fs::exists(out())) << says;
  }

  TempDir dir_;
};

TEST_F(Gpt2Cli, ImportsACheckpointThatGeneratesTrainsAndExportsBack) {
  Outcome imported = import();
  ASSERT_EQ(imported.status, 0) << imported.output;
  EXPECT_TRUE(contains(imported.output, "imported GPT-2 (2 layers, 2 heads, dim 16, context 32, vocab 260; tokenizer "
                                        "gpt2-bpe:")) << imported.output;
  for (const char* name : {"latest", "model.safetensors", "vocab.json", "merges.txt"})
    EXPECT_TRUE(fs::exists(out() + "/" + name)) << name;

  Outcome generated =
      weft_cli("generate --checkpoint " + out() + " --prompt 'the cat' --max-tokens 6 --threads 1 --json");
  ASSERT_EQ(generated.status, 0) << generated.output;
  const nlohmann::json result = last_line_json(generated.output);
  EXPECT_EQ(result["prompt_tokens"], 5);  // "the" merges to one token; " cat" is its four bytes
  EXPECT_EQ(result["generated_tokens"], 6);
  EXPECT_TRUE(result["tokenizer"].get<std::string>().starts_with("gpt2-bpe:"));

  write_file(dir_.file("text.txt"), std::string(400, 'x') + "\nthe cat and the other cat\n");
  Outcome trained = weft_cli("train --model gpt --init-from " + out() + " --data " + dir_.file("text.txt") +
                             " --steps 1 --batch-size 2 --threads 1 --val-fraction 0 --out " + dir_.file("run"));
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_TRUE(fs::exists(dir_.file("run/vocab.json")));

  // Text tokenized with the same files into shards trains without naming the tokenizer again.
  Outcome encoded = weft_cli("tokenize encode " + dir_.file("text.txt") + " --tokenizer " + hf() + " --val-fraction 0 "
                             "--out " + dir_.file("shards"));
  ASSERT_EQ(encoded.status, 0) << encoded.output;
  Outcome from_shards = weft_cli("train --model gpt --init-from " + out() + " --data " + dir_.file("shards") +
                                 " --steps 1 --batch-size 2 --threads 1");
  ASSERT_EQ(from_shards.status, 0) << from_shards.output;

  Outcome exported = weft_cli("export gpt2 " + out() + " --out " + dir_.file("exported"));
  ASSERT_EQ(exported.status, 0) << exported.output;
  for (const char* name : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    EXPECT_EQ(read_file(hf() + "/" + name), read_file(dir_.file("exported/") + name)) << name;
}

TEST_F(Gpt2Cli, AnExistingOutIsReplacedOnlyWithOverwrite) {
  fs::create_directories(out());
  write_file(out() + "/notes.txt", "mine");
  expect_usage_error(import(), "--out " + out() + ": exists already; pass --overwrite to replace it");
  EXPECT_EQ(read_file(out() + "/notes.txt"), "mine");
  ASSERT_EQ(import(" --overwrite").status, 0);
  EXPECT_TRUE(fs::exists(out() + "/model.safetensors"));
  EXPECT_EQ(read_file(out() + "/notes.txt"), "mine");
  Outcome again = weft_cli("export gpt2 " + out() + " --out " + hf());
  expect_usage_error(again, "--out " + hf() + ": exists already");
}

TEST_F(Gpt2Cli, RefusesAMissingOrMistypedConfig) {
  const std::string config = read_file(hf() + "/config.json");
  fs::remove(hf() + "/config.json");
  expect_refused(hf() + ": no config.json; expected a GPT-2 in Hugging Face's layout");
  nlohmann::json c = nlohmann::json::parse(config);
  c["n_layer"] = "2";
  write_file(hf() + "/config.json", c.dump());
  expect_refused("config.json: \"n_layer\" must be an integer in [1, 1024], found \"2\"");
  write_file(hf() + "/config.json", config.substr(0, config.size() / 2));
  expect_refused("config.json is not valid JSON");
}

TEST_F(Gpt2Cli, RefusesWhatWeftsGptCannotRepresent) {
  const nlohmann::json config = nlohmann::json::parse(read_file(hf() + "/config.json"));
  for (const auto& [key, value, says] :
       {std::tuple<std::string, nlohmann::json, std::string>{"activation_function", "relu",
                                                             "\"relu\", not GELU's tanh form (gelu_new)"},
        {"layer_norm_epsilon", 1e-6, "\"layer_norm_epsilon\" is 1e-06, not GPT-2's 1e-05"},
        {"n_inner", 17, "\"n_inner\" is 17, not 4 * n_embd (64)"},
        {"scale_attn_by_inverse_layer_idx", true, "attention scaled by its layer too)"},
        {"model_type", "llama", "\"model_type\" is \"llama\", not \"gpt2\""}}) {
    nlohmann::json c = config;
    c[key] = value;
    write_file(hf() + "/config.json", c.dump());
    expect_refused(says + "; weft's GPT cannot represent it");
  }
}

TEST_F(Gpt2Cli, RefusesWeightsThatDoNotFitTheConfig) {
  const std::string weights = read_file(hf() + "/model.safetensors");
  using Tensors = std::vector<std::pair<std::string, Tensor>>;
  rewrite_weights([](Tensors& tensors) {
    std::erase_if(tensors, [](const auto& named) { return named.first == "transformer.h.1.mlp.c_fc.weight"; });
  });
  expect_refused("model.safetensors: has no tensor 'h.1.mlp.c_fc.weight' (expected [16, 64] (Conv1D's [in, out])");

  write_file(hf() + "/model.safetensors", weights);
  rewrite_weights([](Tensors& tensors) {
    for (auto& [name, t] : tensors)  // weft's orientation, not Conv1D's
      if (name == "transformer.h.0.attn.c_attn.weight") t = t.transpose(0, 1).contiguous();
  });
  expect_refused("'transformer.h.0.attn.c_attn.weight' is [48, 16], expected [16, 48] (Conv1D's [in, out])");

  write_file(hf() + "/model.safetensors", weights);
  rewrite_weights([](Tensors& tensors) { tensors.emplace_back("lm_head.weight", Tensor::zeros({260, 16})); });
  expect_refused("lm_head.weight differs from wte.weight: an output head of its own");

  write_file(hf() + "/model.safetensors", weights.substr(0, weights.size() - 100));
  expect_refused("run past the end of the data section (");

  fs::remove(hf() + "/model.safetensors");
  write_file(hf() + "/pytorch_model.bin", "PK");
  expect_refused("pytorch_model.bin: not a zip archive, as torch.save writes");
  fs::remove(hf() + "/pytorch_model.bin");
  expect_refused("no model.safetensors nor pytorch_model.bin (expected a GPT-2 in Hugging Face's layout)");
}

TEST_F(Gpt2Cli, RefusesMalformedTokenizerFiles) {
  const std::string merges = read_file(hf() + "/merges.txt");
  write_file(hf() + "/merges.txt", merges + "t h e\n");
  expect_refused("merges.txt: line 5: expected two tokens and one space between them");
  write_file(hf() + "/merges.txt", merges);
  const std::string vocab = read_file(hf() + "/vocab.json");
  write_file(hf() + "/vocab.json", vocab.substr(0, vocab.size() / 2));
  expect_refused("vocab.json is not valid JSON");
  write_file(hf() + "/vocab.json", "[\"t\", \"h\"]");
  expect_refused("vocab.json: expected a JSON object of tokens and their ids");
  fs::remove(hf() + "/vocab.json");
  expect_refused("vocab.json is missing");
}

}  // namespace
}  // namespace weft::testing
