#include <gtest/gtest.h>

#include <cmath>

#include "module_gradcheck.h"
#include "weft/autograd/node.h"
#include "weft/core/random.h"
#include "weft/nn/layers.h"
#include "weft/ops/conv.h"
#include "weft/ops/embedding.h"
#include "weft/ops/linear.h"
#include "weft/ops/norm.h"
#include "weft/ops/pool.h"
#include "weft/ops/reduce.h"

namespace weft::nn {
namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

struct Stats {
  double min, max, mean, var;
};
Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{v[0], v[0], 0, 0};
  for (double x : v) s.min = std::min(s.min, x), s.max = std::max(s.max, x), s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}

// U(-b, b): every draw inside the bound, the range used, mean 0 and variance b^2 / 3 (within
// 5 standard errors of the estimates for n draws).
void expect_uniform(const Tensor& t, double bound) {
  Stats s = stats(t);
  const double n = static_cast<double>(t.numel()), var = bound * bound / 3;
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, bound * (1 - 10 / n));
  EXPECT_NEAR(s.mean, 0, 5 * std::sqrt(var / n));
  EXPECT_NEAR(s.var, var, 5 * 0.9 * var / std::sqrt(n));
}

TEST(Layer, LinearAndConvInitialisationMatchesPyTorch) {
  Linear linear(1000, 500);
  expect_uniform(linear.weight, 1 / std::sqrt(1000.0));
  expect_uniform(linear.bias, 1 / std::sqrt(1000.0));
  Conv2d conv(16, 64, 3);
  expect_uniform(conv.weight, 1 / std::sqrt(16 * 9.0));
  expect_uniform(conv.bias, 1 / std::sqrt(16 * 9.0));
  Conv2d grouped(16, 64, {3, 5}, 1, 0, 1, /*groups=*/4);
  EXPECT_EQ(grouped.weight.shape(), (Shape{64, 4, 3, 5}));
  expect_uniform(grouped.weight, 1 / std::sqrt(4 * 15.0));
}

TEST(Layer, EmbeddingAndNormInitialisation) {
  Stats s = stats(Embedding(1000, 64).weight);
  EXPECT_NEAR(s.mean, 0, 0.02);
  EXPECT_NEAR(s.var, 1, 0.03);
  BatchNorm2d bn(3);
  LayerNorm ln({2, 3});
  for (const Tensor& ones : {bn.weight, bn.running_var, ln.weight})
    for (double v : ones.to_vector<double>()) EXPECT_EQ(v, 1);
  for (const Tensor& zeros : {bn.bias, bn.running_mean, ln.bias})
    for (double v : zeros.to_vector<double>()) EXPECT_EQ(v, 0);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::i64);
  EXPECT_EQ(ln.weight.shape(), (Shape{2, 3}));
}

TEST(Layer, InitialisationIsSeeded) {
  manual_seed(7);
  Linear a(20, 10);
  manual_seed(7);
  Linear b(20, 10);
  EXPECT_TRUE(same_values(a.weight, b.weight) && same_values(a.bias, b.bias));
  Generator g1(3), g2(3);
  a.reset_parameters(g1);
  b.reset_parameters(g2);
  EXPECT_TRUE(same_values(a.weight, b.weight) && same_values(a.bias, b.bias));
  Tensor t = Tensor::empty({4, 4}, DType::bf16);
  init::normal_(t, 2, 0.5, g1);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_THROW(init::kaiming_uniform_(Tensor::empty({5})), ShapeError);
}

TEST(Layer, ForwardEqualsTheFunctionalOp) {
  manual_seed(11);
  Tensor x2 = Tensor::randn({3, 5});
  Linear linear(5, 4);
  EXPECT_TRUE(same_values(linear(x2), weft::linear(x2, linear.weight, linear.bias)));
  Linear no_bias(5, 4, false);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_TRUE(same_values(no_bias(x2), weft::linear(x2, no_bias.weight)));

  Tensor image = Tensor::randn({2, 4, 7, 7});
  Conv2d conv(4, 6, 3, 2, 1, 1, 2);
  EXPECT_TRUE(same_values(conv(image), conv2d(image, conv.weight, conv.bias, {{2, 2}, {1, 1}, {1, 1}, 2})));
  Conv2d dilated(4, 2, {3, 1}, 1, {0, 1}, 2, 1, false);
  EXPECT_TRUE(same_values(dilated(image), conv2d(image, dilated.weight, {}, {{1, 1}, {0, 1}, {2, 2}, 1})));

  EXPECT_TRUE(same_values(MaxPool2d(2)(image), max_pool2d(image, {{2, 2}, {2, 2}, {0, 0}})));
  EXPECT_TRUE(same_values(MaxPool2d(3, 2, 1)(image), max_pool2d(image, {{3, 3}, {2, 2}, {1, 1}})));

  BatchNorm2d bn(4, 1e-3, 0.2);
  Tensor mean = bn.running_mean.clone(), var = bn.running_var.clone();
  EXPECT_TRUE(same_values(bn(image), batch_norm(image, mean, var, bn.weight, bn.bias, true, 0.2, 1e-3)));
  EXPECT_TRUE(same_values(bn.running_mean, mean) && same_values(bn.running_var, var));
  bn.eval();
  EXPECT_TRUE(same_values(bn(image), batch_norm(image, mean, var, bn.weight, bn.bias, false, 0.2, 1e-3)));
  EXPECT_THROW(bn(x2), ShapeError);

  Tensor seq = Tensor::randn({2, 3, 4});
  LayerNorm ln({3, 4}, 1e-6);
  EXPECT_TRUE(same_values(ln(seq), layer_norm(seq, {3, 4}, ln.weight, ln.bias, 1e-6)));
  LayerNorm ln_last(4);
  EXPECT_TRUE(same_values(ln_last(seq), layer_norm(seq, {4}, ln_last.weight, ln_last.bias)));

  Tensor indices = Tensor::from_vector<int64_t>({3, 0, 9, 3}, {2, 2});
  Embedding embed(10, 5);
  EXPECT_TRUE(same_values(embed(indices), embedding(indices, embed.weight)));

  EXPECT_TRUE(same_values(ReLU()(seq), relu(seq)));
  EXPECT_TRUE(same_values(GELU()(seq), gelu(seq)));
  EXPECT_TRUE(same_values(GELU(GeluApproximation::tanh)(seq), gelu(seq, GeluApproximation::tanh)));
  EXPECT_EQ(Flatten()(image).shape(), (Shape{2, 4 * 7 * 7}));
  EXPECT_EQ(Flatten(0, 1)(image).shape(), (Shape{8, 7, 7}));

  Dropout drop(0.3);
  manual_seed(5);
  Tensor dropped = drop(seq);
  manual_seed(5);
  EXPECT_TRUE(same_values(dropped, dropout(seq, 0.3, true)));
  EXPECT_THROW(Dropout(1.5), ValueError);

  auto first = std::make_shared<Linear>(5, 3);
  auto second = std::make_shared<Linear>(3, 2);
  Sequential chain(first, std::make_shared<ReLU>(), second);
  EXPECT_TRUE(same_values(chain(x2), (*second)(relu((*first)(x2)))));
}

// Sequential runs a Conv2d followed by a ReLU as one conv2d_relu, unless a hook on either must
// see the tensor between them; the values are the same.
TEST(Layer, SequentialFusesConvAndReluWithoutHooks) {
  manual_seed(12);
  auto conv = std::make_shared<Conv2d>(3, 8, 3);
  auto relu_layer = std::make_shared<ReLU>();
  Sequential block(conv, relu_layer, std::make_shared<MaxPool2d>(2));
  Tensor image = Tensor::randn({2, 3, 8, 8});
  EXPECT_EQ((*conv)(image).grad_fn()->name(), "conv2d");  // alone: not fused
  Sequential pair(conv, relu_layer);
  Tensor y = pair(image);
  EXPECT_EQ(y.grad_fn()->name(), "conv2d_relu");
  EXPECT_TRUE(same_values(y, relu(conv2d(image, conv->weight, conv->bias))));
  Tensor seen;
  RemovableHandle hook = conv->register_forward_hook([&](Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> {
    seen = out;
    return std::nullopt;
  });
  Tensor hooked = pair(image);
  EXPECT_EQ(hooked.grad_fn()->name(), "relu");
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(seen.grad_fn()->name(), "conv2d");  // the hook saw the convolution's own output
  EXPECT_TRUE(same_values(hooked, y));
  hook.remove();

  // With the pooling after them, the three run as one op; a hook on the pooling leaves conv2d_relu.
  Tensor pooled = block(image);
  EXPECT_EQ(pooled.grad_fn()->name(), "conv2d_relu_max_pool2d");
  EXPECT_TRUE(same_values(pooled, max_pool2d(y, {{2, 2}, {2, 2}, {0, 0}})));
  RemovableHandle pool_hook = block[2]->register_forward_pre_hook([&](Module&, const Tensor& in) -> std::optional<Tensor> {
    seen = in;
    return std::nullopt;
  });
  EXPECT_EQ(block(image).grad_fn()->name(), "max_pool2d");
  EXPECT_EQ(seen.grad_fn()->name(), "conv2d_relu");
  EXPECT_TRUE(same_values(block(image), pooled));
  pool_hook.remove();

  // A subclass may override forward, so only the exact classes fuse.
  struct Doubled : ReLU {
    Tensor forward(const Tensor& x) override { return relu(x) * 2.0; }
  };
  Sequential custom(conv, std::make_shared<Doubled>());
  EXPECT_TRUE(same_values(custom(image), y * 2.0));
}

TEST(Layer, TransformerBlockForwardAndBackward) {
  manual_seed(3);
  TransformerBlock block(16, 4);
  EXPECT_EQ(block.get_parameter("attn.c_attn.weight").shape(), (Shape{48, 16}));
  EXPECT_EQ(block.mlp->c_fc->get_parameter("weight").shape(), (Shape{64, 16}));
  Tensor x = Tensor::randn({2, 5, 16}).requires_grad_();
  Tensor y = block(x);
  EXPECT_EQ(y.shape(), x.shape());
  sum(mul(y, y)).backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  for (const auto& [name, p] : block.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
  EXPECT_THROW(block(Tensor::randn({2, 5, 8})), ShapeError);
  EXPECT_THROW(TransformerBlock(10, 4), ValueError);
}

TEST(Layer, TransformerBlockGradcheck) {
  manual_seed(4);
  TransformerBlock block(8, 2);
  block.to(DType::f64);
  Tensor x = Tensor::randn({2, 3, 8}, DType::f64).requires_grad_();
  NamedTensors leaves = block.named_parameters();
  leaves.emplace_back("x", x);
  testing::expect_leaves_gradcheck([&] { return block(x); }, leaves);
}

}  // namespace
}  // namespace weft::nn
