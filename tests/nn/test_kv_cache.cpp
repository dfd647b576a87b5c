// The GPT's cached forward (nn/kv_cache.h): the full forward's logits up to f32 rounding, in place, and
// its limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/gpt.h"
#include "weft/ops/arith.h"
#include "weft/ops/shape.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

const nn::GPTConfig kConfig{.layers = 3, .heads = 2, .dim = 32, .context = 16, .vocab = 37};

Tensor token_ids(int64_t batch, int64_t length, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * length));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919 + 13) % vocab);
  return Tensor::from_vector(ids, {batch, length});
}

std::shared_ptr<nn::GPT> trained_looking_gpt() {
  manual_seed(5);
  auto model = std::make_shared<nn::GPT>(kConfig);
  // Larger weights than GPT-2's initialisation, so that attention is far from uniform and a
  // position or key read from the wrong place changes the logits by much more than rounding.
  NoGradGuard no_grad;
  for (Tensor& p : model->parameters()) p.copy_(mul(p, 10.0));
  model->eval();
  return model;
}

// Prefill, single tokens, then a chunk: every route a generation takes through the cache.
TEST(KVCache, CachedForwardGivesTheFullForwardsLogitsAtEveryPosition) {
  std::shared_ptr<nn::GPT> model = trained_looking_gpt();
  NoGradGuard no_grad;
  const Tensor tokens = token_ids(2, 14, kConfig.vocab);
  const Tensor full = model->forward(tokens);

  nn::KVCache cache = model->make_kv_cache(/*batch=*/2);
  std::vector<Tensor> pieces;
  pieces.push_back(model->forward(tokens.narrow(1, 0, 5).contiguous(), cache));
  for (int64_t t = 5; t < 11; ++t) pieces.push_back(model->forward(tokens.narrow(1, t, 1).contiguous(), cache));
  pieces.push_back(model->forward(tokens.narrow(1, 11, 3).contiguous(), cache));
  EXPECT_EQ(cache.length(), 14);
  const Tensor cached = cat(pieces, 1);
  ASSERT_EQ(cached.shape(), full.shape());

  // The exact logits, from the same weights in f64. The cached and the full forward are f32
  // computations that sum in different orders (a product of one or two rows runs on a dot-product
  // kernel, one of fourteen on oneDNN's GEMM), and these large weights amplify rounding through
  // the layers to a few 1e-5; a key or position read from the wrong place is off by O(1).
  auto reference = std::make_shared<nn::GPT>(kConfig);
  reference->load_state_dict(model->state_dict());
  reference->to(DType::f64);
  reference->eval();
  const std::vector<double> exact = reference->forward(tokens).to_vector<double>();
  const std::vector<float> full_logits = full.to_vector<float>(), got = cached.to_vector<float>();
  double largest_logit = 0;
  for (double x : exact) largest_logit = std::max(largest_logit, std::abs(x));
  ASSERT_GT(largest_logit, 1) << "logits this small would hide a wrong position";
  constexpr double kRounding = 2e-4;  // relative; observed worst: full 2.2e-5, cached 6.5e-5
  for (size_t i = 0; i < exact.size(); ++i) {
    const double scale = 1 + std::abs(exact[i]);
    ASSERT_LE(std::abs(full_logits[i] - exact[i]) / scale, kRounding) << "full forward, logit " << i;
    ASSERT_LE(std::abs(got[i] - exact[i]) / scale, kRounding)
        << "logit " << i << " (position " << (i / kConfig.vocab) % 14 << "): cached " << got[i] << ", full "
        << full_logits[i] << ", exact " << exact[i];
  }
}

TEST(KVCache, AppendsIntoItsPreallocatedStorage) {
  nn::KVCache cache(/*layers=*/1, /*batch=*/1, /*heads=*/2, /*capacity=*/8, /*head_dim=*/4);
  Generator gen(1);
  const Tensor k1 = Tensor::randn({1, 2, 3, 4}, gen), v1 = Tensor::randn({1, 2, 3, 4}, gen);
  auto [keys1, values1] = cache.append(0, k1, v1);
  cache.advance(3);
  const Tensor k2 = Tensor::randn({1, 2, 1, 4}, gen), v2 = Tensor::randn({1, 2, 1, 4}, gen);
  auto [keys2, values2] = cache.append(0, k2, v2);
  cache.advance(1);

  EXPECT_EQ(keys2.shape(), (Shape{1, 2, 4, 4}));
  EXPECT_EQ(keys2.storage().data(), keys1.storage().data()) << "appending must not reallocate";
  EXPECT_EQ(keys2.data_ptr(), keys1.data_ptr());
  EXPECT_EQ(keys2.narrow(2, 0, 3).to_vector<float>(), k1.to_vector<float>());
  EXPECT_EQ(keys2.narrow(2, 3, 1).to_vector<float>(), k2.to_vector<float>());
  EXPECT_EQ(values2.narrow(2, 3, 1).to_vector<float>(), v2.to_vector<float>());
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.append(0, k2, v2).first.size(2), 1);
}

TEST(KVCache, RefusesToRunPastTheContext) {
  std::shared_ptr<nn::GPT> model = trained_looking_gpt();
  NoGradGuard no_grad;
  nn::KVCache cache = model->make_kv_cache();
  model->forward(token_ids(1, 15, kConfig.vocab), cache);
  const std::string message =
      message_of<ShapeError>([&] { model->forward(token_ids(1, 2, kConfig.vocab), cache); });
  EXPECT_TRUE(contains(message, "15 cached and 2 new tokens do not fit the context of 16")) << message;
  EXPECT_EQ(cache.length(), 15) << "a refused forward leaves the cache as it was";
  model->forward(token_ids(1, 1, kConfig.vocab), cache);
  EXPECT_EQ(cache.length(), 16);
}

TEST(KVCache, RefusesACacheOfAnotherShape) {
  std::shared_ptr<nn::GPT> model = trained_looking_gpt();
  NoGradGuard no_grad;
  nn::KVCache cache = model->make_kv_cache(/*batch=*/2);
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { model->forward(token_ids(1, 3, kConfig.vocab), cache); }),
                       "cannot serve 3 layers at batch 1"));
}

TEST(KVCache, RefusesKeysWithGradientHistory) {
  std::shared_ptr<nn::GPT> model = trained_looking_gpt();
  nn::KVCache cache = model->make_kv_cache();
  const std::string message =
      message_of<ValueError>([&] { model->forward(token_ids(1, 3, kConfig.vocab), cache); });
  EXPECT_TRUE(contains(message, "NoGradGuard")) << message;
}

}  // namespace
}  // namespace weft
