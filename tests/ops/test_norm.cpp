#include <cmath>
#include <tuple>

#include "gradcheck.h"
#include "weft/kernels/cpu/norm.h"
#include "weft/ops/norm.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  ASSERT_TRUE(actual.defined() && expected.defined());
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.dtype(), expected.dtype());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i;
}

Tensor randn(const Shape& shape, DType dtype, uint64_t seed, double scale = 1, double shift = 0) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype) * scale + shift;
}

// bf16 outputs round once from f32 (fast) or f64 (reference): a bf16 ulp apart at most.
double rtol_for(DType t) { return t == DType::bf16 ? 1e-2 : 1e-4; }

TEST(NormKernel, LayerNormMatchesReference) {
  // f32: 48 x 700 is above kParallelGrain, so rows split across threads and dweight / dbias
  // come from per-thread partials; bf16 checks the rounding on a smaller, serial case.
  for (auto [dtype, M, D] : {std::tuple{DType::f32, 48, 700}, std::tuple{DType::bf16, 8, 300}}) {
    Tensor x = randn({M, D}, dtype, 1, 2.0, 3.0), g = randn({M, D}, dtype, 2);
    Tensor w = randn({D}, dtype, 3), b = randn({D}, dtype, 4);
    for (bool affine : {true, false}) {
      Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
      cpu::NormForward f = cpu::layer_norm(x, D, wa, ba, 1e-5);
      cpu::NormForward r = cpu::reference::layer_norm(x, D, wa, ba, 1e-5);
      expect_close(f.y, r.y, 1e-5, rtol_for(dtype));
      expect_close(f.mean, r.mean, 1e-5, 1e-5);
      expect_close(f.rstd, r.rstd, 1e-5, 1e-4);
      cpu::NormBackward fb = cpu::layer_norm_backward(g, x, f.mean, f.rstd, wa, true, true);
      cpu::NormBackward rb = cpu::reference::layer_norm_backward(g, x, f.mean, f.rstd, wa, true, true);
      expect_close(fb.dx, rb.dx, 1e-4, rtol_for(dtype));
      expect_close(fb.dweight, rb.dweight, 1e-3, rtol_for(dtype));
      expect_close(fb.dbias, rb.dbias, 1e-3, rtol_for(dtype));
    }
  }
}

TEST(NormKernel, BatchNormMatchesReference) {
  // f32: 16 x 32 x 8 x 8 = kParallelGrain, so channels split across threads; bf16 smaller, serial.
  for (auto [dtype, shape] : {std::pair{DType::f32, Shape{16, 32, 8, 8}}, std::pair{DType::bf16, Shape{4, 32, 3, 3}}}) {
    Tensor x = randn(shape, dtype, 5, 2.0, -1.0), g = randn(shape, dtype, 6);
    Tensor w = randn({32}, dtype, 7), b = randn({32}, dtype, 8);
    Tensor rm = randn({32}, DType::f32, 9), rv = randn({32}, DType::f32, 10, 0.1, 1.0);
    for (bool batch_stats : {true, false}) {
      cpu::NormForward r = cpu::reference::batch_norm(x, rm, rv, w, b, batch_stats, 1e-5);
      // Batch statistics without running ones, so rm / rv stay as the reference saw them.
      cpu::NormForward f = batch_stats ? cpu::batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5)
                                       : cpu::batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
      expect_close(f.y, r.y, 1e-4, rtol_for(dtype));
      expect_close(f.mean, r.mean, 1e-5, 1e-5);
      expect_close(f.rstd, r.rstd, 1e-5, 1e-4);
      cpu::NormBackward fb = cpu::batch_norm_backward(g, x, f.mean, f.rstd, w, batch_stats, true, true);
      cpu::NormBackward rb = cpu::reference::batch_norm_backward(g, x, f.mean, f.rstd, w, batch_stats, true, true);
      expect_close(fb.dx, rb.dx, 1e-4, rtol_for(dtype));
      expect_close(fb.dweight, rb.dweight, 1e-2, rtol_for(dtype));
      expect_close(fb.dbias, rb.dbias, 1e-2, rtol_for(dtype));
    }
  }
}

TEST(Norm, LayerNormValues) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 10, 10, 10, 10}, {2, 4});
  std::vector<double> y = layer_norm(x, {4}, Tensor(), Tensor()).to_vector<double>();
  const double rstd = 1 / std::sqrt(1.25 + 1e-5);  // mean 2.5, biased variance 1.25
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y[j], (j + 1 - 2.5) * rstd, 1e-12);
  for (int j = 4; j < 8; ++j) EXPECT_NEAR(y[j], 0.0, 1e-12);  // a constant row normalises to 0
  Tensor w = Tensor::from_vector<double>({1, 2, 3, 4}, {4}), b = Tensor::full({4}, 0.5, DType::f64);
  std::vector<double> ya = layer_norm(x, {4}, w, b).to_vector<double>();
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(ya[j], (j + 1 - 2.5) * rstd * (j + 1) + 0.5, 1e-12);
}

TEST(Norm, LayerNormBadInputs) {
  Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_THROW(layer_norm(x, {3}, Tensor(), Tensor()), ShapeError);
  EXPECT_THROW(layer_norm(x, {}, Tensor(), Tensor()), ShapeError);
  EXPECT_THROW(layer_norm(x, {1, 2, 3, 4}, Tensor(), Tensor()), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, Tensor::ones({3}), Tensor()), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, Tensor::ones({4}, DType::f64), Tensor()), DTypeError);
  EXPECT_THROW(layer_norm(Tensor::zeros({2, 4}, DType::i64), {4}, Tensor(), Tensor()), DTypeError);
}

TEST(NormGrad, LayerNorm) {
  Tensor x = randn64({3, 4, 5}, 1), w = randn64({5}, 2), b = randn64({5}, 3);
  expect_gradcheck([](auto& v) { return layer_norm(v[0], {5}, v[1], v[2]); }, {x, w, b});
  expect_gradcheck([](auto& v) { return layer_norm(v[0], {4, 5}, v[1], v[2]); },
                   {x, randn64({4, 5}, 4), randn64({4, 5}, 5)});
  expect_gradcheck([](auto& v) { return layer_norm(v[0], {5}, Tensor(), Tensor()); }, {x});
  expect_gradcheck([](auto& v) { return layer_norm(v[0], {5}, Tensor(), v[1]); }, {x, b});
}

TEST(Norm, BatchNormRunningStats) {
  // Channel 0: 1 2 3 4 (mean 2.5, biased var 1.25, unbiased 5/3);
  // channel 1: 2 2 2 10 (mean 4, squared deviations 48: biased 12, unbiased 16).
  Tensor x = Tensor::from_vector<float>({1, 2, 2, 2, 3, 2, 4, 10}, {4, 2});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  std::vector<double> y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5).to_vector<double>();
  EXPECT_NEAR(rm.at({0}), 0.1 * 2.5, 1e-6);
  EXPECT_NEAR(rm.at({1}), 0.1 * 4, 1e-6);
  EXPECT_NEAR(rv.at({0}), 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(rv.at({1}), 0.9 + 0.1 * 16, 1e-6);
  // Training normalises with the biased batch variance.
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  EXPECT_NEAR(y[7], (10 - 4) / std::sqrt(12 + 1e-5), 1e-5);

  // Eval normalises with the running statistics and leaves them alone.
  Tensor w = Tensor::from_vector<float>({2, 3}, {2}), b = Tensor::from_vector<float>({1, -1}, {2});
  std::vector<double> ye = batch_norm(x, rm, rv, w, b, false).to_vector<double>();
  EXPECT_NEAR(ye[7], (10 - 0.4) / std::sqrt(2.5 + 1e-5) * 3 - 1, 1e-5);
  EXPECT_NEAR(rm.at({1}), 0.4, 1e-6);

  // Without running statistics, eval falls back to the batch's (PyTorch's track_running_stats=False).
  std::vector<double> yb = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false).to_vector<double>();
  EXPECT_NEAR(yb[0], y[0], 1e-6);

  // f64 running stats under an f32 input, and a 4-d input: mean over N, H, W.
  Tensor x4 = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 1, 2, 2});
  Tensor rm4 = Tensor::zeros({1}, DType::f64), rv4 = Tensor::zeros({1}, DType::f64);
  batch_norm(x4, rm4, rv4, Tensor(), Tensor(), true, 0.5);
  EXPECT_NEAR(rm4.item(), 0.5 * 4.5, 1e-6);
  EXPECT_NEAR(rv4.item(), 0.5 * 6.0, 1e-6);  // unbiased variance of 1..8 is 6
}

TEST(Norm, BatchNormBadInputs) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  EXPECT_THROW(batch_norm(Tensor::zeros({1, 3}), rm, rv, Tensor(), Tensor(), true), ValueError);  // 1 value per channel
  EXPECT_NO_THROW(batch_norm(Tensor::zeros({1, 3}), rm, rv, Tensor(), Tensor(), false));
  EXPECT_THROW(batch_norm(Tensor::zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(Tensor::zeros({4, 3}), Tensor::zeros({2}), rv, Tensor(), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(Tensor::zeros({4, 3}), rm, Tensor(), Tensor(), Tensor(), true), ValueError);
  EXPECT_THROW(batch_norm(Tensor::zeros({4, 3}), rm, rv, Tensor::ones({4}), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(Tensor::zeros({4, 3}), rm, rv, Tensor(), Tensor::ones({3}, DType::bf16), true), DTypeError);
}

TEST(NormGrad, BatchNormTraining) {
  expect_gradcheck([](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
                   {randn64({5, 3}, 6), randn64({3}, 7), randn64({3}, 8)});
  // Running stats are updated on every evaluation; training output does not depend on them.
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  expect_gradcheck([rm, rv](auto& v) { return batch_norm(v[0], rm, rv, v[1], v[2], true); },
                   {randn64({2, 3, 2, 2}, 9), randn64({3}, 10), randn64({3}, 11)});
  expect_gradcheck([](auto& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                   {randn64({4, 2, 3}, 12)});
}

TEST(NormGrad, BatchNormEval) {
  Tensor rm = randn64({3}, 13), rv = Tensor::full({3}, 0.7, DType::f64);
  expect_gradcheck([rm, rv](auto& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); },
                   {randn64({4, 3, 2}, 14), randn64({3}, 15), randn64({3}, 16)});
}

}  // namespace
}  // namespace weft
