// Weight-only quantization of a whole model in place (quant::quantize_linear_weights): a GPT's
// projections become int8 or int4 layers under their own names, its logits stay close to the f32
// model's, and its cached decoding (a few rows: the weights read in their bytes) agrees with its
// whole-sequence forward (many rows: the weights expanded for the GEMM).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/gpt.h"
#include "weft/quant/linear.h"
#include "weft/quant/ptq.h"

namespace weft::quant {
namespace {

const nn::GPTConfig kConfig{.layers = 2, .heads = 4, .dim = 64, .context = 32, .vocab = 100};

Tensor tokens() {
  std::vector<int64_t> ids(2 * 24);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 11) % kConfig.vocab);
  return Tensor::from_vector(ids, {2, 24});
}

// max |a - b| / max |b|
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, size = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    size = std::max(size, std::abs(y[i]));
  }
  return diff / size;
}

// The bytes of the blocks' projections: weights, scales and biases.
int64_t projection_bytes(nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& [name, t] : model.state_dict())
    if (name.find(".attn.c_") != std::string::npos || name.find(".mlp.c_") != std::string::npos) bytes += t.nbytes();
  return bytes;
}

// Tolerances from the formats' rounding: int8 rounds each weight to 1/254 of its row's range, int4
// to 1/14 of its group's; measured on this model: int8 0.4%, int4 6.9% of the largest logit. The
// projections shrink to 1 byte a weight and an f32 scale a row (int8), or half a byte and an f32
// scale per 32 (int4), with their f32 biases: 28% and 17% of f32 at this width.
TEST(WeightOnlyModels, GptLinearsBecomeQuantizedUnderTheirNamesAndStayClose) {
  for (auto [bits, tolerance, shrink] : {std::tuple{8, 0.01, 0.29}, std::tuple{4, 0.10, 0.18}}) {
    SCOPED_TRACE(str("int", bits));
    manual_seed(0);
    nn::GPT model(kConfig);
    model.eval();
    NoGradGuard no_grad;
    const Tensor f32_logits = model(tokens());
    const std::vector<std::string> names = [&] {
      std::vector<std::string> n;
      for (const auto& [name, t] : model.state_dict()) n.push_back(name);
      return n;
    }();
    const int64_t f32_bytes = projection_bytes(model);
    EXPECT_EQ(quantize_linear_weights(model, bits), kConfig.layers * 4);
    EXPECT_LT(projection_bytes(model), shrink * f32_bytes);
    EXPECT_NE(dynamic_cast<Int8WeightOnlyLinear*>(&model.get_submodule("h.0.attn.c_attn")) != nullptr, bits == 4);
    EXPECT_NE(dynamic_cast<Int4Linear*>(&model.get_submodule("h.1.mlp.c_proj")) != nullptr, bits == 8);
    // The state dict keeps the f32 model's names (the scales join them), the tied embedding f32.
    std::vector<std::string> quantized_names;
    for (const auto& [name, t] : model.state_dict()) quantized_names.push_back(name);
    for (const std::string& name : names) EXPECT_NE(std::find(quantized_names.begin(), quantized_names.end(), name),
                                                    quantized_names.end()) << name;
    EXPECT_EQ(model.state_dict().at("h.0.mlp.c_fc.weight").dtype(), bits == 8 ? DType::i8 : DType::u8);
    EXPECT_EQ(model.state_dict().at("wte.weight").dtype(), DType::f32);
    const Tensor logits = model(tokens());
    const double error = relative_error(logits, f32_logits);
    std::printf("int%d weight-only GPT: logits within %.4f of the f32 model's largest\n", bits, error);
    EXPECT_LT(error, tolerance);
    EXPECT_GT(error, 0) << "the weights were rounded";

    // Decoding one token at a time through the cache (1 and then 2 rows: the fused path) gives
    // the whole-sequence forward's logits (48 rows: the GEMM path) at every position.
    nn::KVCache cache = model.make_kv_cache(2);
    Tensor t = tokens();
    for (int64_t pos = 0; pos < t.size(1); ++pos) {
      Tensor step = model(t.narrow(1, pos, 1).contiguous(), cache);
      EXPECT_LT(relative_error(step, logits.narrow(1, pos, 1)), 1e-5) << "position " << pos;
    }
  }
}

TEST(WeightOnlyModels, OnlyEightAndFourBitsAreTaken) {
  nn::GPT model(kConfig);
  EXPECT_TRUE(testing::contains(testing::message_of<ValueError>([&] { quantize_linear_weights(model, 3); }),
                                "bits must be 8 or 4, got 3"));
  EXPECT_EQ(model.state_dict().at("h.0.mlp.c_fc.weight").dtype(), DType::f32) << "a refusal changes nothing";
}

}  // namespace
}  // namespace weft::quant
