// A GPT-2 in Hugging Face's layout, imported, against PyTorch: tests/infer/gpt2_reference.py
// (Debian's python3-torch and python3-regex) writes a tiny randomly initialised GPT-2 as
// GPT2LMHeadModel saves one, its logits for a token sequence (computed in float64 by a GPT-2
// written from Hugging Face's definition), and OpenAI's encoder.py's ids for tricky texts. weft
// imports the directory into a checkpoint and loads it as weft generate and serve do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "weft/autograd/grad_mode.h"
#include "weft/infer/huggingface_gpt2.h"
#include "weft/infer/load.h"
#include "weft/io/safetensors.h"

namespace weft {
namespace {

// The script's files, written once for the suite.
const testing::TempDir& reference() {
  static const testing::TempDir dir;
  // OpenBLAS's core detection as make bench sets it: PyTorch's matmuls then run alike everywhere.
  static const int status = std::system(
      (std::string("OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 ") + WEFT_GPT2_REFERENCE_SCRIPT +
       " " + dir.path()).c_str());
  EXPECT_EQ(status, 0) << "gpt2_reference.py failed (it needs Debian's python3-torch and python3-regex)";  // each test
  return dir;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string imported(const testing::TempDir& dir, const std::string& from, const std::string& name) {
  infer::write_gpt2_checkpoint(infer::read_huggingface_gpt2(from), dir.file(name));
  return dir.file(name);
}

TEST(HuggingFaceGpt2, ImportedLogitsMatchPyTorchs) {
  testing::TempDir dir;
  const infer::LoadedModel loaded = infer::load_model(imported(dir, reference().file("hf"), "checkpoint"));
  ASSERT_EQ(loaded.kind, nn::ModelKind::gpt);
  EXPECT_EQ(loaded.gpt->config.layers, 2);
  EXPECT_EQ(loaded.gpt->config.context, 32);
  EXPECT_EQ(loaded.gpt->config.vocab, 300);
  const io::SafetensorsFile expected = io::load_safetensors(reference().file("reference.safetensors"));
  const Tensor tokens = expected.tensors[0].second, logits = expected.tensors[1].second;  // i64 [T], f64 [T, V]
  const int64_t T = tokens.size(0), V = logits.size(1);
  NoGradGuard no_grad;
  const Tensor weft_logits = (*loaded.gpt)(tokens.view({1, T})).contiguous().to(DType::f64);
  ASSERT_EQ(weft_logits.shape(), (Shape{1, T, V}));
  const double* got = weft_logits.data<double>();
  const double* want = logits.contiguous().data<double>();
  double error = 0, largest = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    error = std::max(error, std::abs(got[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  // weft computes in f32 (rounding 6e-8 relative per operation) and the reference in f64 from the
  // same f32 weights; through two blocks of width 64 that leaves errors near 1e-6 on logits of
  // order one. In this model one square projection left untransposed moves them by 3.7, layer
  // norms with epsilon 1e-6 by 9e-4, GELU's erf form by 6e-4.
  EXPECT_GT(largest, 0.5);
  EXPECT_LT(error, 1e-5) << "largest logit " << largest;
  std::cout << "max |weft - pytorch| over " << T << " x " << V << " logits: " << error << " (largest |logit| "
            << largest << ")\n";
}

// The same GPT-2 saved by torch.save as pytorch_model.bin imports to the same checkpoint, byte
// for byte, as from its model.safetensors.
TEST(HuggingFaceGpt2, PytorchModelBinImportsAsModelSafetensorsDoes) {
  testing::TempDir dir;
  const std::string from_safetensors = imported(dir, reference().file("hf"), "a");
  const std::string from_bin = imported(dir, reference().file("hf-bin"), "b");
  ASSERT_FALSE(std::filesystem::exists(reference().file("hf-bin/model.safetensors")));
  const std::string bytes = file_bytes(from_safetensors + "/model.safetensors");
  EXPECT_GT(bytes.size(), 100000u);
  EXPECT_EQ(bytes, file_bytes(from_bin + "/model.safetensors"));
}

TEST(HuggingFaceGpt2, CheckpointsTokenizerEncodesAsOpenAisEncoder) {
  testing::TempDir dir;
  const infer::LoadedModel loaded = infer::load_model(imported(dir, reference().file("hf"), "checkpoint"));
  ASSERT_TRUE(loaded.tokenizer->identity().starts_with("gpt2-bpe:"));
  const nlohmann::json cases = nlohmann::json::parse(file_bytes(reference().file("encodings.json")));
  ASSERT_EQ(cases.size(), 9u + 20);
  for (const nlohmann::json& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = c["ids"];
    EXPECT_EQ(loaded.tokenizer->encode(text), ids) << text;
    EXPECT_EQ(loaded.tokenizer->decode(ids), text);
  }
}

TEST(HuggingFaceGpt2, ImportExportImportIsBitExact) {
  testing::TempDir dir;
  const std::string hf = reference().file("hf");
  const std::string first = imported(dir, hf, "first");
  infer::write_huggingface_gpt2(infer::read_gpt2_checkpoint(first), dir.file("exported"));
  const std::string second = imported(dir, dir.file("exported"), "second");
  for (const char* name : {"model.safetensors", "vocab.json", "merges.txt"}) {
    const std::string bytes = file_bytes(first + "/" + name);
    EXPECT_FALSE(bytes.empty()) << name;
    EXPECT_EQ(bytes, file_bytes(second + "/" + name)) << name;
  }
  // The exported tensors are the original file's, in Conv1D's orientation again.
  const io::SafetensorsFile original = io::load_safetensors(hf + "/model.safetensors");
  std::map<std::string, Tensor> exported;
  for (const auto& [name, t] : io::load_safetensors(dir.file("exported/model.safetensors")).tensors) exported[name] = t;
  EXPECT_EQ(exported.size(), 2u + 2 * 12 + 2);
  for (const auto& [name, t] : original.tensors) {
    if (name == "lm_head.weight" || name.ends_with("attn.bias") || name.ends_with("attn.masked_bias")) continue;
    ASSERT_TRUE(exported.contains(name)) << name;
    ASSERT_EQ(exported[name].shape(), t.shape()) << name;
    EXPECT_EQ(exported[name].to_vector<float>(), t.to_vector<float>()) << name;
  }
}

}  // namespace
}  // namespace weft
