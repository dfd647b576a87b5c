#include "gradcheck.h"
#include "weft/core/random.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"
#include "weft/ops/shape.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

TEST(ArithGrad, BinaryOpsWithBroadcasting) {
  Tensor a = randn64({3, 4}, 1), b = randn64({4}, 2), c = randn64({3, 1}, 3);
  expect_gradcheck([](auto& x) { return add(x[0], x[1]); }, {a, b});
  expect_gradcheck([](auto& x) { return sub(x[0], x[1]); }, {a, c});
  expect_gradcheck([](auto& x) { return mul(x[0], x[1]); }, {a, b});
  expect_gradcheck([](auto& x) { return div(x[0], add(mul(x[1], x[1]), 1.0)); }, {a, c});
}

TEST(ArithGrad, UnaryOps) {
  Tensor a = randn64({2, 5}, 4);
  Tensor positive = add(mul(a, a), 0.5);
  expect_gradcheck([](auto& x) { return neg(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return exp(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return log(x[0]); }, {positive});
  expect_gradcheck([](auto& x) { return sqrt(x[0]); }, {positive});
  expect_gradcheck([](auto& x) { return pow(x[0], 3.0); }, {a});
  expect_gradcheck([](auto& x) { return pow(x[0], x[1]); }, {positive, a});
}

TEST(ArithGrad, Activations) {
  Tensor a = randn64({3, 7}, 5);
  expect_gradcheck([](auto& x) { return relu(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return gelu(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return gelu(x[0], GeluApproximation::tanh); }, {a});
  expect_gradcheck([](auto& x) { return sigmoid(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return tanh(x[0]); }, {a});
}

TEST(ArithGrad, Reductions) {
  Tensor a = randn64({2, 3, 4}, 6);
  expect_gradcheck([](auto& x) { return sum(x[0]); }, {a});
  expect_gradcheck([](auto& x) { return sum(x[0], {1}); }, {a});
  expect_gradcheck([](auto& x) { return sum(x[0], {0, 2}, true); }, {a});
  expect_gradcheck([](auto& x) { return mean(x[0], {-1}); }, {a});
  expect_gradcheck([](auto& x) { return max(x[0], 1); }, {a});
  expect_gradcheck([](auto& x) { return max(x[0], 2, true); }, {a});
}

TEST(ArithGrad, ViewsAndJoins) {
  Tensor a = randn64({2, 3, 4}, 7), b = randn64({2, 2, 4}, 8);
  expect_gradcheck([](auto& x) { return x[0].transpose(0, 2).reshape({4, 6}); }, {a});
  expect_gradcheck([](auto& x) { return x[0].permute({2, 0, 1}).contiguous(); }, {a});
  expect_gradcheck([](auto& x) { return x[0].narrow(1, 1, 2); }, {a});
  expect_gradcheck([](auto& x) { return x[0].slice(2, 0, 4, 2); }, {a});
  expect_gradcheck([](auto& x) { return x[0].select(0, 1); }, {a});
  expect_gradcheck([](auto& x) { return x[0].select(1, 0).unsqueeze(0).expand({3, 2, 4}); }, {a});
  expect_gradcheck([](auto& x) { return x[0].flatten(1).view({2, 12}); }, {a});
  expect_gradcheck([](auto& x) { return cat({x[0], x[1]}, 1); }, {a, b});
  expect_gradcheck([](auto& x) { return stack({x[0], x[0]}, 0); }, {a});
  expect_gradcheck([](auto& x) {
    auto pieces = split(x[0], 1, 1);
    return mul(pieces[0], pieces[2]);
  }, {a});
}

// Slices of one input (attention's q, k, v) add their gradients into one tensor: three disjoint
// thirds and a strided slice across two of them, so each element gets one or two terms, whose f32
// sum is exact in either order.
TEST(ArithGrad, SlicesOfOneInputSumIntoOneGradient) {
  Generator gen(3);
  Tensor x = Tensor::randn({5, 12}, gen);
  x.requires_grad_();
  std::vector<Tensor> parts = split(x, 4, 1);
  Tensor g_parts = Tensor::randn({5, 12}, gen), g_strided = Tensor::randn({5, 4}, gen);
  Tensor loss = sum(mul(x.slice(1, 2, 10, 2), g_strided));
  for (int64_t i = 0; i < 3; ++i) loss = add(loss, sum(mul(parts[i], g_parts.slice(1, 4 * i, 4 * i + 4))));
  loss.backward();
  std::vector<float> expected = g_parts.to_vector<float>(), strided = g_strided.to_vector<float>();
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t j = 0; j < 4; ++j) expected[r * 12 + 2 + 2 * j] += strided[r * 4 + j];
  EXPECT_EQ(x.grad().to_vector<float>(), expected);
}

}  // namespace
}  // namespace weft
