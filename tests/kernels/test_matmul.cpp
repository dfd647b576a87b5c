#include <gtest/gtest.h>

#include <cmath>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/matmul.h"

namespace weft {
namespace {

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

// Every element within atol + rtol * |expected|.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i << " of " << shape_str(actual.shape());
}

// fast vs reference for one case; the reference sums in f64 over the very same input values.
void expect_matches_reference(const Tensor& a, const Tensor& b, const Tensor& bias = {},
                              std::optional<DType> out = std::nullopt, double rtol = 1e-4, double atol = 1e-4) {
  Tensor fast = cpu::matmul(a, b, bias, out);
  Tensor ref = cpu::reference::matmul(a, b, bias, out);
  EXPECT_EQ(fast.dtype(), out.value_or(a.dtype()));
  EXPECT_TRUE(fast.is_contiguous());
  expect_close(fast, ref, rtol, atol);
}

TEST(MatmulKernel, F32MatchesReference) {
  expect_matches_reference(randn({7, 13}, 1), randn({13, 5}, 2));
  expect_matches_reference(randn({64, 33}, 3), randn({33, 17}, 4), randn({17}, 5));
  expect_matches_reference(randn({1, 40}, 6), randn({40, 1}, 7));
  expect_matches_reference(randn({3, 200}, 8), randn({200, 2}, 9), randn({2}, 10));
}

TEST(MatmulKernel, F64BlockedLoopsMatchReference) {
  // Sizes cross the row (32), K (128) and N (256) block edges.
  expect_matches_reference(randn({70, 300}, 11, DType::f64), randn({300, 260}, 12, DType::f64),
                           randn({260}, 13, DType::f64), std::nullopt, 1e-12, 1e-12);
  expect_matches_reference(randn({2, 3, 5, 4}, 14, DType::f64), randn({3, 4, 6}, 15, DType::f64), {},
                           std::nullopt, 1e-12, 1e-12);
  expect_matches_reference(randn({9, 5}, 16, DType::f64).t(), randn({6, 9}, 17, DType::f64).t(), {},
                           std::nullopt, 1e-12, 1e-12);
}

TEST(MatmulKernel, Bf16AgainstF64OfTheRoundedInputs) {
  Tensor a = randn({2, 24, 96}, 20, DType::bf16), b = randn({96, 40}, 21, DType::bf16);
  Tensor bias32 = randn({40}, 22), bias16 = randn({40}, 22, DType::bf16);
  // f32 out: only the f32 accumulation differs from the exact sum of the bf16 products.
  expect_matches_reference(a, b, {}, DType::f32, 1e-4, 1e-4);
  expect_matches_reference(a, b, bias32, DType::f32, 1e-4, 1e-4);
  // bf16 out: one rounding to 8 significant bits, a relative error up to 2^-9 (plus slack for
  // the f32 sum landing near a rounding boundary).
  expect_matches_reference(a, b, bias32, DType::bf16, 8e-3, 1e-3);
  expect_matches_reference(a, b, bias16, std::nullopt, 8e-3, 1e-3);
  expect_matches_reference(a.select(0, 1).t().t(), b.t().contiguous_untracked().t(), {}, DType::f32, 1e-4, 1e-4);
}

TEST(MatmulKernel, F16WidenedToF32) {
  Tensor a = randn({5, 12}, 23, DType::f16), b = randn({12, 7}, 24, DType::f16);
  expect_matches_reference(a, b, {}, DType::f32, 1e-5, 1e-5);
  expect_matches_reference(a, b, randn({7}, 25, DType::f16), std::nullopt, 2e-3, 2e-3);
}

TEST(MatmulKernel, StridedOperandsWithoutCopies) {
  Tensor a = randn({13, 7}, 30), b = randn({5, 13}, 31);
  expect_matches_reference(a.t(), b.t());                          // both transposed
  expect_matches_reference(randn({9, 20}, 32).narrow(1, 3, 13), b.t());  // row stride 20 for 13 columns
  expect_matches_reference(randn({7, 26}, 33).slice(1, 0, 26, 2), b.t());  // column stride 2: copied
  expect_matches_reference(randn({6, 4, 3}, 34).permute({1, 0, 2}), randn({4, 3, 5}, 35));  // odd batch stride
  expect_matches_reference(randn({4, 3, 6}, 36).transpose(1, 2), randn({4, 5, 3}, 37).transpose(1, 2));
}

TEST(MatmulKernel, BatchedWithBroadcasting) {
  expect_matches_reference(randn({2, 1, 5, 6}, 40), randn({3, 6, 4}, 41));
  expect_matches_reference(randn({5, 6}, 42), randn({3, 6, 4}, 43), randn({4}, 44));
  expect_matches_reference(randn({4, 5, 6}, 45), randn({6, 3}, 46), randn({3}, 47));  // folded to one GEMM
  expect_matches_reference(randn({4, 5, 6}, 48), randn({1, 6, 3}, 49));
  expect_matches_reference(randn({4, 5, 6}, 50).transpose(0, 1), randn({6, 3}, 51));  // rows don't fold
  // Expanded (stride-0) batch dims: passed as broadcast, or copied when both operands repeat.
  expect_matches_reference(randn({4, 5, 6}, 52), randn({6, 3}, 53).unsqueeze(0).expand({4, 6, 3}));
  expect_matches_reference(randn({5, 6}, 54).unsqueeze(0).expand({4, 5, 6}), randn({4, 6, 3}, 55));
  expect_matches_reference(randn({5, 6}, 56).unsqueeze(0).expand({2, 5, 6}),
                           randn({6, 3}, 57).unsqueeze(0).expand({2, 6, 3}));
}

// One to four rows against a weight [N, K] seen transposed, as a Linear layer at a small batch
// multiplies: sizes around the vector width and oneDNN's blocks, strided operands and bias.
TEST(MatmulKernel, SmallBatchesAgainstATransposedWeight) {
  uint64_t seed = 100;
  for (int64_t M : {1, 2, 3, 4})
    for (auto [K, N] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {17, 10}, {64, 4}, {300, 303}, {784, 512}}) {
      Tensor w = randn({N, K}, seed++), x = randn({M, K}, seed++), bias = randn({N}, seed++);
      expect_matches_reference(x, w.t());
      expect_matches_reference(x, w.t(), bias);
    }
  // Rows of a apart (a column slice), rows of the weight apart, a strided bias, a 3-d batch of one.
  Tensor w = randn({40, 30}, 200);
  expect_matches_reference(randn({2, 50}, 201).narrow(1, 7, 20), w.narrow(1, 2, 20).t(),
                           randn({80}, 202).slice(0, 0, 80, 2));
  expect_matches_reference(randn({3, 40}, 203).narrow(1, 4, 30), w.t());
  expect_matches_reference(randn({1, 1, 30}, 204), w.t(), randn({40}, 205));
}

TEST(MatmulKernel, EmptyDims) {
  EXPECT_EQ(cpu::matmul(randn({0, 4}, 60), randn({4, 3}, 61)).shape(), (Shape{0, 3}));
  EXPECT_EQ(cpu::matmul(randn({2, 0, 4}, 62), randn({4, 3}, 63)).shape(), (Shape{2, 0, 3}));
  Tensor bias = randn({3}, 64);
  Tensor r = cpu::matmul(randn({2, 0}, 65), randn({0, 3}, 66), bias);  // K = 0: just the bias
  expect_close(r, bias.unsqueeze(0).expand({2, 3}), 0, 0);
  expect_close(cpu::matmul(randn({2, 0}, 67, DType::f64), randn({0, 3}, 68, DType::f64)),
               Tensor::zeros({2, 3}, DType::f64), 0, 0);
}

TEST(MatmulKernel, RepeatedCallsReuseTheCachedPrimitive) {
  Tensor a = randn({8, 16}, 70), b = randn({16, 4}, 71);
  Tensor first = cpu::matmul(a, b);
  for (int i = 0; i < 3; ++i) expect_close(cpu::matmul(a, b), first, 0, 0);
  const int threads = get_num_threads();  // a primitive is built for a thread count: a new key
  set_num_threads(1);
  expect_close(cpu::matmul(a, b), first, 1e-6, 1e-6);
  set_num_threads(threads);
  expect_close(cpu::matmul(randn({8, 16}, 72), b), cpu::reference::matmul(randn({8, 16}, 72), b), 1e-4, 1e-4);
}

TEST(MatmulKernel, BadInputsThrow) {
  try {
    cpu::matmul(randn({2, 3}, 80), randn({4, 5}, 81));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::matmul(randn({2, 3}, 82), randn({3, 4}, 83, DType::f64)), DTypeError);
  EXPECT_THROW(cpu::matmul(randn({3}, 84), randn({3, 4}, 85)), ShapeError);
  EXPECT_THROW(cpu::matmul(randn({2, 2, 3}, 86), randn({3, 3, 4}, 87)), ShapeError);  // batch 2 vs 3
  EXPECT_THROW(cpu::matmul(randn({2, 3}, 88), randn({3, 4}, 89), randn({5}, 90)), ShapeError);
  EXPECT_THROW(cpu::matmul(randn({2, 3}, 91), randn({3, 4}, 92), {}, DType::bf16), DTypeError);
  EXPECT_THROW(cpu::matmul(randn({2, 3}, 93, DType::bf16), randn({3, 4}, 94, DType::bf16), randn({4}, 95, DType::f64)),
               DTypeError);
  EXPECT_THROW(cpu::matmul(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 4}, DType::i32)), DTypeError);
}

TEST(MatmulKernel, FoldRows) {
  Tensor x = randn({2, 3, 4}, 96);
  Tensor rows = cpu::fold_rows(x);
  EXPECT_EQ(rows.shape(), (Shape{6, 4}));
  EXPECT_EQ(rows.data_ptr(), x.data_ptr());  // a view
  Tensor permuted = x.transpose(0, 1);
  expect_close(cpu::fold_rows(permuted), permuted.contiguous_untracked().as_strided({6, 4}, {4, 1}, 0), 0, 0);
}

}  // namespace
}  // namespace weft
