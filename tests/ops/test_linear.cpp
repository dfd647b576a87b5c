#include <cmath>

#include "gradcheck.h"
#include "weft/kernels/cpu/matmul.h"
#include "weft/ops/linear.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

Tensor randn32(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i << " of " << shape_str(actual.shape());
}

template <typename Fn>
void expect_error_naming(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(MatmulOp, OneDimensionalOperandsFollowTorch) {
  Tensor v = randn32({4}, 1), m = randn32({4, 3}, 2), left = randn32({5, 4}, 3), batch = randn32({2, 5, 4}, 4);
  Tensor bm = randn32({2, 4, 3}, 5);
  Tensor dot = matmul(v, v);
  EXPECT_EQ(dot.dim(), 0);
  double expected = 0;
  for (double x : v.to_vector<double>()) expected += x * x;
  EXPECT_NEAR(dot.item(), expected, 1e-5);
  auto column = [](const Tensor& t) { return t.unsqueeze(-1); };
  expect_close(matmul(v, m), cpu::reference::matmul(v.unsqueeze(0), m).squeeze(0), 1e-5, 1e-5);
  expect_close(matmul(left, v), cpu::reference::matmul(left, column(v)).squeeze(-1), 1e-5, 1e-5);
  expect_close(matmul(batch, v), cpu::reference::matmul(batch, column(v)).squeeze(-1), 1e-5, 1e-5);
  expect_close(matmul(v, bm), cpu::reference::matmul(v.unsqueeze(0), bm).squeeze(1), 1e-5, 1e-5);
  EXPECT_EQ(matmul(v, bm).shape(), (Shape{2, 3}));
  Tensor strided = randn32({8}, 6).slice(0, 0, 8, 2);  // a vector with stride 2
  expect_close(matmul(left, strided), cpu::reference::matmul(left, column(strided)).squeeze(-1), 1e-5, 1e-5);
}

TEST(MatmulOp, BatchedAndTransposedMatchReference) {
  Tensor a = randn32({2, 1, 5, 6}, 7), b = randn32({3, 4, 6}, 8);
  expect_close(matmul(a, b.transpose(1, 2)), cpu::reference::matmul(a, b.transpose(1, 2)), 1e-4, 1e-4);
}

TEST(MatmulGrad, TwoDimensional) {
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({3, 4}, 1), randn64({4, 5}, 2)});
  expect_gradcheck([](auto& x) { return matmul(x[0].t(), x[1]); }, {randn64({4, 3}, 3), randn64({4, 2}, 4)});
}

TEST(MatmulGrad, BatchedAndBroadcast) {
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({2, 3, 4}, 5), randn64({2, 4, 2}, 6)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({2, 1, 3, 4}, 7), randn64({3, 4, 2}, 8)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({2, 3, 4}, 9), randn64({4, 2}, 10)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({3, 4}, 11), randn64({2, 4, 2}, 12)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({2, 3, 4}, 13), randn64({1, 4, 2}, 14)});
}

TEST(MatmulGrad, OneDimensional) {
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({4}, 15), randn64({4}, 16)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({4}, 17), randn64({2, 4, 3}, 18)});
  expect_gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {randn64({2, 3, 4}, 19), randn64({4}, 20)});
}

TEST(MatmulGrad, OnlyInputsThatRequireGradGetOne) {
  Tensor a = randn64({3, 4}, 21).requires_grad_(), b = randn64({4, 2}, 22);
  sum(matmul(a, b)).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(LinearOp, ForwardMatchesReference) {
  Tensor x = randn32({2, 3, 8}, 30), w = randn32({5, 8}, 31), b = randn32({5}, 32);
  expect_close(linear(x, w, b), cpu::reference::matmul(x, w.t(), b), 1e-4, 1e-4);
  expect_close(linear(x, w), cpu::reference::matmul(x, w.t()), 1e-4, 1e-4);
  Tensor xt = randn32({3, 2, 8}, 33).transpose(0, 1);  // rows that don't fold: copied
  expect_close(linear(xt, w, b), cpu::reference::matmul(xt, w.t(), b), 1e-4, 1e-4);
  Tensor v = randn32({8}, 34);
  expect_close(linear(v, w, b), cpu::reference::matmul(v.unsqueeze(0), w.t(), b).squeeze(0), 1e-4, 1e-4);
}

TEST(LinearOp, Bf16WithF32Bias) {
  Tensor x = randn32({4, 16}, 35, DType::bf16), w = randn32({6, 16}, 36, DType::bf16), b = randn32({6}, 37);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_close(y, cpu::reference::matmul(x, w.t(), b, DType::bf16), 8e-3, 1e-3);
}

TEST(LinearOp, F32GradientsMatchReferenceFormulas) {
  Tensor x = randn32({2, 3, 8}, 38).requires_grad_(), w = randn32({5, 8}, 39).requires_grad_();
  Tensor b = randn32({5}, 40).requires_grad_();
  Tensor g = randn32({2, 3, 5}, 41);
  linear(x, w, b).backward(g);
  Tensor g2 = g.reshape({6, 5}), x2 = x.detach().reshape({6, 8});
  expect_close(x.grad(), cpu::reference::matmul(g2, w.detach()).reshape({2, 3, 8}), 1e-4, 1e-4);
  expect_close(w.grad(), cpu::reference::matmul(g2.t(), x2), 1e-4, 1e-4);
  expect_close(b.grad(), cpu::reference::matmul(Tensor::ones({1, 6}), g2).squeeze(0), 1e-4, 1e-4);
}

TEST(LinearGrad, WithAndWithoutBias) {
  expect_gradcheck([](auto& x) { return linear(x[0], x[1], x[2]); },
                   {randn64({3, 4}, 50), randn64({2, 4}, 51), randn64({2}, 52)});
  expect_gradcheck([](auto& x) { return linear(x[0], x[1]); }, {randn64({3, 4}, 53), randn64({2, 4}, 54)});
}

TEST(LinearGrad, ThreeDimensionalAndOneDimensionalInput) {
  expect_gradcheck([](auto& x) { return linear(x[0], x[1], x[2]); },
                   {randn64({2, 3, 4}, 55), randn64({5, 4}, 56), randn64({5}, 57)});
  expect_gradcheck([](auto& x) { return linear(x[0].transpose(0, 1), x[1]); },
                   {randn64({3, 2, 4}, 58), randn64({5, 4}, 59)});
  expect_gradcheck([](auto& x) { return linear(x[0], x[1], x[2]); },
                   {randn64({4}, 60), randn64({3, 4}, 61), randn64({3}, 62)});
}

TEST(LinearGrad, OnlyInputsThatRequireGradGetOne) {
  Tensor x = randn64({3, 4}, 63), w = randn64({2, 4}, 64).requires_grad_(), b = randn64({2}, 65);
  sum(linear(x, w, b)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(LinearOp, BadInputsThrow) {
  expect_error_naming([] { matmul(randn32({2, 3}, 70), randn32({4, 5}, 71)); }, {"[2, 3]", "[4, 5]"});
  EXPECT_THROW(matmul(randn32({2, 3}, 72), randn32({4, 5}, 73)), ShapeError);
  EXPECT_THROW(matmul(randn32({2, 3}, 74), randn32({3}, 75, DType::f64)), DTypeError);
  EXPECT_THROW(matmul(Tensor::scalar(2), randn32({3}, 76)), ShapeError);
  EXPECT_THROW(matmul(randn32({3}, 77), Tensor::scalar(2)), ShapeError);
  expect_error_naming([] { linear(randn32({2, 3}, 78), randn32({5, 4}, 79)); }, {"[2, 3]", "[5, 4]"});
  EXPECT_THROW(linear(randn32({2, 3}, 80), randn32({5, 4}, 81)), ShapeError);
  EXPECT_THROW(linear(randn32({2, 4}, 82), randn32({5, 4}, 83, DType::f64)), DTypeError);
  EXPECT_THROW(linear(Tensor::scalar(1), randn32({5, 1}, 84)), ShapeError);
  EXPECT_THROW(linear(randn32({2, 4}, 85), randn32({5, 4}, 86), randn32({4}, 87)), ShapeError);
}

}  // namespace
}  // namespace weft
