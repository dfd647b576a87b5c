#include <cmath>
#include <limits>

#include "gradcheck.h"
#include "weft/kernels/cpu/softmax.h"
#include "weft/ops/loss.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i;
}

// Targets in [0, C), every `ignore_every`-th one replaced by ignore_index.
Tensor targets(int64_t n, int64_t C, int64_t ignore_every, int64_t ignore_index = -100) {
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (ignore_every > 0 && i % ignore_every == 0) ? ignore_index : (i * 7 + 3) % C;
  return Tensor::from_vector(t, {n});
}

// PyTorch's cross_entropy for [N, C] logits in plain double loops: per-row losses.
std::vector<double> expected_rows(const std::vector<std::vector<double>>& x, const std::vector<int64_t>& t,
                                  int64_t ignore_index, double eps) {
  std::vector<double> loss;
  for (size_t n = 0; n < x.size(); ++n) {
    if (t[n] == ignore_index) {
      loss.push_back(0);
      continue;
    }
    double lse = 0;
    for (double v : x[n]) lse += std::exp(v);
    lse = std::log(lse);
    double smooth = 0;  // sum over classes of -log p
    for (double v : x[n]) smooth += lse - v;
    const double C = static_cast<double>(x[n].size());
    loss.push_back((1 - eps) * (lse - x[n][t[n]]) + eps * smooth / C);
  }
  return loss;
}

TEST(LossKernel, CrossEntropyMatchesReference) {
  Generator gen(1);
  struct Case { Shape logits; DType dtype; double atol, rtol; };
  // 60 x 600 is above kParallelGrain; [4, 5, 3, 2] has the class dim in the middle.
  for (const Case& c : {Case{{60, 600}, DType::f32, 1e-5, 1e-5}, Case{{16, 300}, DType::bf16, 1e-5, 1e-4},
                        Case{{4, 5, 3, 2}, DType::f32, 1e-5, 1e-5}, Case{{4, 5, 3, 2}, DType::f64, 1e-12, 1e-12}}) {
    Tensor x = Tensor::randn(c.logits, gen, c.dtype) * 2.0;
    Shape ts = c.logits;
    ts.erase(ts.begin() + 1);
    const int64_t C = c.logits[1];
    Tensor t = targets(numel(ts), C, 5).reshape(ts);
    for (double eps : {0.0, 0.1}) {
      cpu::CrossEntropyForward f = cpu::cross_entropy_forward(x, t, -100, eps);
      expect_close(f.loss, cpu::reference::cross_entropy(x, t, -100, eps), c.atol, c.rtol);
      EXPECT_EQ(f.count, numel(ts) - (numel(ts) + 4) / 5);
      Tensor g = Tensor::randn(ts, gen, DType::f32);
      // Both compute in at least f32 and round once to x's dtype.
      expect_close(cpu::cross_entropy_backward(g, 0.5, x, t, f.lse, -100, eps),
                   cpu::reference::cross_entropy_backward(g, 0.5, x, t, -100, eps), 1e-6,
                   c.dtype == DType::bf16 ? 1e-2 : 1e-5);
    }
  }
}

TEST(Loss, CrossEntropyKnownValues) {
  Tensor t0 = Tensor::from_vector<int64_t>({0}, {1});
  EXPECT_NEAR(cross_entropy(Tensor::zeros({1, 2}), t0).item(), std::log(2.0), 1e-7);
  // Uniform logits: log C whatever the smoothing.
  Tensor t14 = Tensor::from_vector<int64_t>({1, 4}, {2});
  EXPECT_NEAR(cross_entropy(Tensor::zeros({2, 5}), t14, Reduction::mean, -100, 0.3).item(), std::log(5.0), 1e-6);
  // [1, 2, 3], target 0, eps 0.1: lse = 3.40760596, loss = 0.9 * 2.40760596 + 0.1 * 1.40760596.
  Tensor x = Tensor::from_vector<double>({1, 2, 3}, {1, 3});
  EXPECT_NEAR(cross_entropy(x, t0, Reduction::mean, -100, 0.1).item(), 2.30760596, 1e-8);
}

TEST(Loss, CrossEntropyLabelSmoothingAndIgnoreIndex) {
  std::vector<std::vector<double>> rows = {{1, 2, 3, 0}, {0.5, -1, 2, 2}, {3, 0, 0, -2}, {0, 0, 0, 1}, {-1, 4, 1, 0}};
  std::vector<int64_t> t = {2, 7, 0, 7, 1};  // 7 is ignore_index: rows 1 and 3 do not count
  std::vector<double> flat;
  for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  Tensor x = Tensor::from_vector(flat, {5, 4});
  x.requires_grad_(true);
  Tensor target = Tensor::from_vector(t, {5});
  const double eps = 0.25;
  std::vector<double> expected = expected_rows(rows, t, 7, eps);
  double total = 0;
  for (double v : expected) total += v;

  expect_close(cross_entropy(x, target, Reduction::none, 7, eps), Tensor::from_vector(expected, {5}), 1e-12, 0);
  EXPECT_NEAR(cross_entropy(x, target, Reduction::sum, 7, eps).item(), total, 1e-12);
  Tensor loss = cross_entropy(x, target, Reduction::mean, 7, eps);
  EXPECT_NEAR(loss.item(), total / 3, 1e-12);  // the mean counts the 3 rows not ignored

  // d loss / d x = (softmax - ((1 - eps) one_hot + eps / C)) / 3 on counted rows, 0 on ignored ones.
  loss.backward();
  std::vector<double> grad = x.grad().to_vector<double>();
  for (size_t n = 0; n < rows.size(); ++n) {
    double z = 0;
    for (double v : rows[n]) z += std::exp(v);
    for (size_t c = 0; c < 4; ++c) {
      const double q = (static_cast<int64_t>(c) == t[n] ? 1 - eps : 0) + eps / 4;
      const double expect = t[n] == 7 ? 0 : (std::exp(rows[n][c]) / z - q) / 3;
      EXPECT_NEAR(grad[n * 4 + c], expect, 1e-12) << n << "," << c;
    }
  }

  Tensor all_ignored = Tensor::from_vector<int64_t>({7, 7, 7, 7, 7}, {5});
  EXPECT_TRUE(std::isnan(cross_entropy(x, all_ignored, Reduction::mean, 7).item()));
  EXPECT_EQ(cross_entropy(x, all_ignored, Reduction::sum, 7).item(), 0.0);
}

TEST(Loss, CrossEntropyReturnsLogitsDtype) {
  Tensor x = Tensor::zeros({3, 4}, DType::bf16);
  Tensor t = Tensor::from_vector<int64_t>({0, 1, 2}, {3});
  EXPECT_EQ(cross_entropy(x, t).dtype(), DType::bf16);
  EXPECT_EQ(cross_entropy(x, t, Reduction::none).shape(), Shape({3}));
  EXPECT_EQ(cross_entropy(Tensor::zeros({3}), Tensor::from_vector<int64_t>({1}, {})).dim(), 0);
}

TEST(Loss, CrossEntropyBadInputs) {
  Tensor x = Tensor::zeros({2, 3});
  try {
    cross_entropy(x, Tensor::from_vector<int64_t>({0, 3}, {2}));
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("target value 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy(x, Tensor::from_vector<int64_t>({-1, 0}, {2})), IndexError);
  EXPECT_NO_THROW(cross_entropy(x, Tensor::from_vector<int64_t>({-100, 0}, {2})));
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({2}, DType::f32)), DTypeError);
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({3}, DType::i64)), ShapeError);
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({2, 1}, DType::i64)), ShapeError);
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({2}, DType::i64)), DTypeError);
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({2}, DType::i64), Reduction::mean, -100, 1.5), ValueError);
}

TEST(LossGrad, CrossEntropy) {
  Tensor t = Tensor::from_vector<int64_t>({1, -100, 4, 0}, {4});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
    for (double eps : {0.0, 0.2})
      expect_gradcheck([r, eps](auto& x) { return cross_entropy(x[0], x[1], r, -100, eps); }, {randn64({4, 5}, 1), t},
                       {true, false});
  Tensor spatial_t = Tensor::from_vector<int64_t>({0, 2, 1, 1, 2, -100, 0, 0}, {2, 2, 2});
  expect_gradcheck([](auto& x) { return cross_entropy(x[0], x[1], Reduction::mean, -100, 0.1); },
                   {randn64({2, 3, 2, 2}, 2), spatial_t}, {true, false});
}

TEST(Loss, MseValues) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3}), b = Tensor::from_vector<float>({1, 0, 0}, {3});
  expect_close(mse_loss(a, b, Reduction::none), Tensor::from_vector<float>({0, 4, 9}, {3}), 0, 0);
  EXPECT_FLOAT_EQ(mse_loss(a, b, Reduction::sum).item(), 13.0f);
  EXPECT_FLOAT_EQ(mse_loss(a, b).item(), 13.0f / 3);
  try {
    mse_loss(a, Tensor::zeros({1}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("same shape"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mse_loss(a, Tensor::zeros({3}, DType::f64)), DTypeError);
}

TEST(LossGrad, Mse) {
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
    expect_gradcheck([r](auto& x) { return mse_loss(x[0], x[1], r); }, {randn64({3, 4}, 3), randn64({3, 4}, 4)});
}

}  // namespace
}  // namespace weft
