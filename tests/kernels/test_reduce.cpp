// Reductions against cpu::reference::sum and hand-computed values: every dim subset of a 3-d
// tensor in several layouts and dtypes, the leading-dims (bias gradient) path, long rows split
// across threads, a million-element sum against f64, max with its indices, and sum_to.
#include "weft/kernels/cpu/reduce.h"

#include <gtest/gtest.h>

#include "thread_count.h"

#include <cmath>
#include <string>
#include <vector>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/elementwise.h"

namespace weft::cpu {
namespace {

using V = std::vector<double>;

using testing::ThreadCount;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

// The logical [5, 6, 7] tensor `x` in three layouts; spare storage holds NaN.
std::vector<std::pair<std::string, Tensor>> layouts(const Tensor& x) {
  Tensor transposed = Tensor::full({7, 6, 5}, NAN, x.dtype()).permute({2, 1, 0});
  transposed.copy_(x);
  Tensor stepped = Tensor::full({10, 6, 15}, NAN, x.dtype()).slice(0, 0, 10, 2).slice(2, 1, 15, 2);
  stepped.copy_(x);
  return {{"contiguous", x}, {"transposed", transposed}, {"stepped", stepped}};
}

// |fast - reference| within rtol of the sum of |x| over the same elements (the scale rounding
// errors grow with), plus one unit in the last place of the output for the 16-bit types.
void expect_sum_close(const Tensor& got, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                      const std::string& what) {
  Tensor want = reference::sum(x, dims, keepdim);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), x.dtype()) << what;
  V g = got.to_vector<double>(), w = want.to_vector<double>();
  V scale = sum(unary(Unary::abs, x.to(DType::f64)), dims, keepdim).to_vector<double>();
  double rtol = x.dtype() == DType::f64 ? 1e-13 : 1e-6;
  double out_ulp = x.dtype() == DType::bf16 ? 0x1p-7 : x.dtype() == DType::f16 ? 0x1p-10 : 0;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], rtol * scale[i] + out_ulp * std::abs(w[i]) + 1e-30) << what << " element " << i;
}

std::string describe(const std::vector<int64_t>& dims, bool keepdim, DType dtype, const std::string& layout) {
  return "dims " + shape_str(dims) + (keepdim ? " keepdim " : " ") + dtype_name(dtype) + " " + layout;
}

TEST(ReduceTest, SumOverEveryDimSubsetMatchesReference) {
  const std::vector<std::vector<int64_t>> subsets = {{}, {0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2},
                                                     {-1}, {2, 0}, {-3, -2}};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (auto& [name, x] : layouts(randn({5, 6, 7}, 1, dtype)))
      for (const auto& dims : subsets)
        for (bool keepdim : {false, true})
          expect_sum_close(sum(x, dims, keepdim), x, dims, keepdim, describe(dims, keepdim, dtype, name));
}

TEST(ReduceTest, SumShapesAndExactValues) {
  Tensor x = Tensor::arange(24, DType::f64).view({2, 3, 4});
  EXPECT_EQ(sum(x, {1}, false).shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(sum(x, {}, false).shape(), Shape{});
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(sum(x, {}, false).item(), 276);
  EXPECT_EQ(sum(x, {1}, false).to_vector<double>(), (V{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(sum(x, {0, 2}, false).to_vector<double>(), (V{60, 92, 124}));
  EXPECT_EQ(sum(x, {0, 1}, false).to_vector<double>(), (V{60, 66, 72, 78}));  // leading dims
  EXPECT_EQ(sum(x.transpose(0, 2), {0}, false).to_vector<double>(), (V{6, 54, 22, 70, 38, 86}));
  EXPECT_EQ(sum(Tensor::scalar(2.5), {}, false).item(), 2.5);
  EXPECT_EQ(sum(Tensor::zeros({0, 3}), {0}, false).to_vector<double>(), (V{0, 0, 0}));
  EXPECT_EQ(sum(Tensor::zeros({3, 0}), {1}, true).to_vector<double>(), (V{0, 0, 0}));
  EXPECT_EQ(sum(Tensor::ones({3, 0}), {0}, false).numel(), 0);
  EXPECT_THROW(sum(x, {1, 1}, false), IndexError);
  EXPECT_THROW(sum(x, {3}, false), IndexError);
  EXPECT_THROW(sum(Tensor::zeros({2}, DType::i64), {}, false), DTypeError);
}

// Reducing the leading dims of a contiguous tensor (a bias gradient: [N, C] -> [C]) takes the
// column path; large enough here to be split across threads.
TEST(ReduceTest, LeadingDimsPathMatchesReference) {
  ThreadCount threads(3);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const Shape& shape : {Shape{129, 257}, Shape{4, 3}, Shape{17000, 2}, Shape{7, 1}}) {
      Tensor x = randn(shape, 2, dtype);
      expect_sum_close(sum(x, {0}, false), x, {0}, false, describe({0}, false, dtype, shape_str(shape)));
    }
    Tensor small = randn({5, 3}, 3, dtype);
    expect_sum_close(sum(small, {0}, true), small, {0}, true, describe({0}, true, dtype, "[5, 3]"));
    Tensor y = randn({3, 44, 257}, 4, dtype);
    expect_sum_close(sum(y, {0, 1}, false), y, {0, 1}, false, describe({0, 1}, false, dtype, "[3, 44, 257]"));
  }
}

// Few long rows (fewer than threads: each row is split) and many rows (rows are shared out).
TEST(ReduceTest, LongAndManyRowsSplitAcrossThreads) {
  ThreadCount threads(3);
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor few = randn({2, 20000}, 4, dtype);
    expect_sum_close(sum(few, {1}, false), few, {1}, false, describe({1}, false, dtype, "[2, 20000]"));
    Tensor many = randn({400, 97}, 5, dtype);
    expect_sum_close(sum(many, {-1}, true), many, {-1}, true, describe({-1}, true, dtype, "[400, 97]"));
    Tensor transposed = randn({257, 129}, 6, dtype).t();
    expect_sum_close(sum(transposed, {0}, false), transposed, {0}, false, describe({0}, false, dtype, "[129, 257]^T"));
  }
}

// A million f32 values summed to one number must agree with the f64 sum: the accumulation
// order has to keep rounding error from growing with the count.
TEST(ReduceTest, MillionElementSumMatchesF64) {
  const int64_t n = 1000000;
  Generator gen(7);
  Tensor uniform = Tensor::rand({n}, gen, DType::f32);
  Tensor constant = Tensor::full({n}, 0.1, DType::f32);  // every add rounds the same way
  Tensor grid = constant.view({1000, 1000});
  for (const Tensor& x : {uniform, constant, grid}) {
    double exact = 0;
    for (double v : x.to_vector<double>()) exact += v;
    for (int threads : {1, 3}) {
      ThreadCount count(threads);
      double got = sum(x, {}, false).item();
      EXPECT_NEAR(got, exact, 1e-5 * exact) << shape_str(x.shape()) << " threads " << threads;
      double got_keep = sum(x, {}, true).item();
      EXPECT_NEAR(got_keep, exact, 1e-5 * exact) << shape_str(x.shape()) << " keepdim threads " << threads;
    }
  }
  // The same through the column path: a million rows of two.
  Tensor columns = Tensor::full({500000, 2}, 0.1, DType::f32);
  V column_sums = sum(columns, {0}, false).to_vector<double>();
  double exact_column = 500000 * static_cast<double>(0.1f);
  EXPECT_NEAR(column_sums[0], exact_column, 1e-5 * exact_column);
  EXPECT_NEAR(column_sums[1], exact_column, 1e-5 * exact_column);
}

TEST(ReduceTest, MaxValuesAndFirstIndexOfTies) {
  Tensor x = Tensor::from_vector({1, 5, 5, -2,   //
                                  3, 3, 0, 3,    //
                                  -1, -4, -1, -9},
                                 {3, 4}, DType::f32);
  MaxResult rows = max(x, 1, false);
  EXPECT_EQ(rows.values.to_vector<double>(), (V{5, 3, -1}));
  EXPECT_EQ(rows.indices.dtype(), DType::i64);
  EXPECT_EQ(rows.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  MaxResult cols = max(x, 0, true);
  EXPECT_EQ(cols.values.shape(), (Shape{1, 4}));
  EXPECT_EQ(cols.values.to_vector<double>(), (V{3, 5, 5, 3}));
  EXPECT_EQ(cols.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(argmax(x, -1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  MaxResult cols_t = max(x.t(), 1, false);  // the same reduction through a transposed view
  EXPECT_EQ(cols_t.values.to_vector<double>(), (V{3, 5, 5, 3}));
  EXPECT_EQ(cols_t.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));

  Tensor inf = Tensor::from_vector({-INFINITY, -INFINITY, -1e30}, {3}, DType::f64);
  EXPECT_EQ(max(inf, 0, false).indices.item(), 2);
  Tensor nan = Tensor::from_vector({1, NAN, 7, NAN}, {4}, DType::f32);
  EXPECT_TRUE(std::isnan(max(nan, 0, false).values.item()));  // NaN propagates, first one
  EXPECT_EQ(max(nan, 0, false).indices.item(), 1);
  EXPECT_EQ(max(Tensor::scalar(4), 0, false).values.item(), 4);
  EXPECT_THROW(max(Tensor::zeros({2, 0}), 1, false), ShapeError);
  EXPECT_THROW(max(x, 2, false), IndexError);
}

TEST(ReduceTest, MaxOverEachDimOfA3dTensorMatchesBruteForce) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    // Rounded values make ties common in every dtype.
    Tensor base = unary(Unary::neg, randn({5, 6, 7}, 8, DType::f64));
    V rounded = base.to_vector<double>();
    for (double& v : rounded) v = std::round(v * 2) / 2;
    Tensor values = Tensor::from_vector(rounded, {5, 6, 7}, DType::f64);
    for (auto& [name, x] : layouts(values.to(dtype))) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        MaxResult r = max(x, dim, true);
        ASSERT_EQ(r.values.dtype(), dtype);
        Shape out_shape = {5, 6, 7};
        out_shape[dim] = 1;
        ASSERT_EQ(r.values.shape(), out_shape);
        for (int64_t i = 0; i < out_shape[0]; ++i)
          for (int64_t j = 0; j < out_shape[1]; ++j)
            for (int64_t k = 0; k < out_shape[2]; ++k) {
              std::vector<int64_t> at = {i, j, k};
              double best = -INFINITY;
              int64_t best_index = -1;
              for (int64_t r_i = 0; r_i < x.shape()[dim]; ++r_i) {
                at[dim] = r_i;
                if (x.at(at) > best) best = x.at(at), best_index = r_i;
              }
              ASSERT_EQ(r.values.at({i, j, k}), best) << name << " dim " << dim;
              ASSERT_EQ(r.indices.at({i, j, k}), best_index) << name << " dim " << dim << " " << dtype_name(dtype);
            }
      }
    }
  }
}

TEST(ReduceTest, SumToReducesBroadcastDims) {
  Tensor x = Tensor::arange(12, DType::f64).view({3, 4});
  EXPECT_TRUE(sum_to(x, {3, 4}).is_same(x));
  EXPECT_EQ(sum_to(x, {4}).shape(), (Shape{4}));
  EXPECT_EQ(sum_to(x, {4}).to_vector<double>(), (V{12, 15, 18, 21}));
  EXPECT_EQ(sum_to(x, {1, 4}).shape(), (Shape{1, 4}));
  EXPECT_EQ(sum_to(x, {1, 4}).to_vector<double>(), (V{12, 15, 18, 21}));
  EXPECT_EQ(sum_to(x, {3, 1}).to_vector<double>(), (V{6, 22, 38}));
  EXPECT_EQ(sum_to(x, {1, 1}).to_vector<double>(), (V{66}));
  EXPECT_EQ(sum_to(x, {}).shape(), Shape{});
  EXPECT_EQ(sum_to(x, {}).item(), 66);
  Tensor y = Tensor::arange(24, DType::f32).view({2, 3, 4});
  EXPECT_EQ(sum_to(y, {3, 1}).shape(), (Shape{3, 1}));
  EXPECT_EQ(sum_to(y, {3, 1}).to_vector<double>(), (V{60, 92, 124}));
  EXPECT_EQ(sum_to(y.transpose(1, 2), {4, 1}).to_vector<double>(), (V{60, 66, 72, 78}));
  // The gradient of a stride-0 broadcast: sum_to undoes expand.
  Tensor e = Tensor::from_vector({1, 2, 3}, {3, 1}, DType::f64).expand({2, 3, 5});
  EXPECT_EQ(sum_to(e, {3, 1}).to_vector<double>(), (V{10, 20, 30}));
  EXPECT_THROW(sum_to(x, {5}), ShapeError);
  EXPECT_THROW(sum_to(x, {2, 3, 4}), ShapeError);
  EXPECT_THROW(sum_to(x, {3, 2}), ShapeError);
}

}  // namespace
}  // namespace weft::cpu
