// Tensor metadata, views (which must share storage and only change shape / strides / offset),
// copies, dtype conversion, element access, printing and random factories.
#include "expect_error.h"
#include "weft/core/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"

namespace weft {
namespace {

using V = std::vector<double>;

using weft::testing::message_of;
using weft::testing::contains;

Tensor iota(const Shape& shape, DType dtype = DType::f32) { return Tensor::arange(numel(shape), dtype).view(shape); }

TEST(TensorTest, FreshTensorIsRowMajorWithZeroOffset) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.storage().nbytes(), 96u);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_THROW(t.size(3), IndexError);
  EXPECT_THROW(t.stride(-4), IndexError);
  EXPECT_FALSE(Tensor().defined());

  Tensor s = Tensor::scalar(2.5, DType::f64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.strides().empty());
  EXPECT_EQ(s.item(), 2.5);
  EXPECT_EQ(Tensor::empty({3, 0, 2}).numel(), 0);
  EXPECT_THROW(Tensor::empty({2, -1}), ShapeError);
}

TEST(TensorTest, TransposeSwapsStridesAndSharesStorage) {
  Tensor x = iota({2, 3});
  Tensor t = x.t();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.data_ptr(), x.data_ptr());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(t.at({i, j}), x.at({j, i}));
  EXPECT_EQ(t.to_vector<double>(), (V{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.transpose(-1, -2).strides(), (Shape{1, 3}));
}

TEST(TensorTest, ContiguousMaterialisesOnlyWhenNeeded) {
  Tensor x = iota({2, 3});
  Tensor same = x.contiguous();
  EXPECT_TRUE(same.is_same(x));
  EXPECT_EQ(same.storage().data(), x.storage().data());

  Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().data(), x.storage().data());
  EXPECT_EQ(c.strides(), (Shape{2, 1}));
  EXPECT_EQ(c.to_vector<double>(), (V{0, 3, 1, 4, 2, 5}));
  // The raw memory is in the new order, not just the logical view.
  const float* p = c.data<float>();
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(c.contiguous_untracked().is_same(c));
  EXPECT_NE(t.contiguous_untracked().storage().data(), x.storage().data());
}

TEST(TensorTest, PermuteNarrowSliceSelect) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(p.at({3, 1, 2}), 23);
  EXPECT_EQ(p.at({1, 0, 2}), 9);
  EXPECT_THROW(x.permute({0, 1}), ShapeError);
  EXPECT_THROW(x.permute({0, 1, 1}), IndexError);

  Tensor n = x.narrow(1, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(n.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(n.storage_offset(), 4);
  EXPECT_EQ(n.at({1, 1, 3}), 23);
  EXPECT_EQ(n.at({0, 0, 0}), 4);
  EXPECT_THROW(x.narrow(1, 2, 2), IndexError);

  Tensor r = Tensor::arange(10);
  Tensor s = r.slice(0, 1, 8, 3);
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.strides(), (Shape{3}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.to_vector<double>(), (V{1, 4, 7}));
  EXPECT_EQ(r.slice(0, 1, 9, 3).to_vector<double>(), (V{1, 4, 7}));
  EXPECT_EQ(r.slice(0, -3, 10).to_vector<double>(), (V{7, 8, 9}));
  EXPECT_EQ(r.slice(0, 8, 100, 5).to_vector<double>(), (V{8}));  // end clamps
  EXPECT_EQ(r.slice(0, 5, 2).numel(), 0);
  EXPECT_THROW(r.slice(0, 0, 5, 0), ValueError);
  Tensor s2 = x.slice(2, 0, 4, 2).slice(0, 1, 2);
  EXPECT_EQ(s2.shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(s2.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(s2.to_vector<double>(), (V{12, 14, 16, 18, 20, 22}));

  Tensor sel = x.select(1, -1);
  EXPECT_EQ(sel.shape(), (Shape{2, 4}));
  EXPECT_EQ(sel.strides(), (Shape{12, 1}));
  EXPECT_EQ(sel.storage_offset(), 8);
  EXPECT_EQ(sel.to_vector<double>(), (V{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(x.select(0, 1).select(1, 2).to_vector<double>(), (V{14, 18, 22}));
  EXPECT_THROW(x.select(1, 3), IndexError);
  EXPECT_THROW(x.select(1, -4), IndexError);
  EXPECT_THROW(x.select(3, 0), IndexError);
}

TEST(TensorTest, ExpandUsesStrideZeroAndSharesStorage) {
  Tensor col = iota({3, 1});
  Tensor e = col.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.storage().data(), col.storage().data());
  EXPECT_EQ(e.at({1, 2, 3}), 2);
  EXPECT_EQ(col.expand({-1, 2}).to_vector<double>(), (V{0, 0, 1, 1, 2, 2}));
  col.fill_(7);
  EXPECT_EQ(e.at({0, 1, 2}), 7);  // the expanded view sees the write
  EXPECT_THROW(col.expand({3, 4}).expand({2, 4}), ShapeError);
  EXPECT_THROW(col.expand({4}), ShapeError);
  EXPECT_FALSE(e.is_contiguous());
}

TEST(TensorTest, SqueezeUnsqueezeFlatten) {
  Tensor x = iota({2, 3});
  Tensor u0 = x.unsqueeze(0), u1 = x.unsqueeze(1), ul = x.unsqueeze(-1);
  EXPECT_EQ(u0.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(u1.shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(ul.shape(), (Shape{2, 3, 1}));
  EXPECT_TRUE(u1.is_contiguous());
  EXPECT_EQ(u1.at({1, 0, 2}), 5);
  EXPECT_EQ(u1.squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(u1.squeeze(1).strides(), (Shape{3, 1}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 3}));  // size 2: nothing to squeeze
  EXPECT_EQ(ul.squeeze(-1).to_vector<double>(), x.to_vector<double>());
  EXPECT_THROW(x.unsqueeze(3), IndexError);
  EXPECT_EQ(Tensor::scalar(1).unsqueeze(0).shape(), (Shape{1}));

  Tensor y = iota({2, 3, 4});
  EXPECT_EQ(y.flatten().shape(), (Shape{24}));
  EXPECT_EQ(y.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(y.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(y.flatten().storage().data(), y.storage().data());
  Tensor yt = y.transpose(0, 2).flatten();  // not viewable: copies
  EXPECT_NE(yt.storage().data(), y.storage().data());
  EXPECT_EQ(yt.at({1}), 12);  // [4, 3, 2] element (0, 0, 1) is y[1, 0, 0]
  EXPECT_EQ(yt.at({2}), 4);   // (0, 1, 0) is y[0, 1, 0]
  EXPECT_EQ(Tensor::scalar(3).flatten().shape(), (Shape{1}));
  EXPECT_THROW(y.flatten(2, 1), IndexError);
}

TEST(TensorTest, ViewOfNonContiguousThrowsAndReshapeCopies) {
  Tensor x = iota({2, 3});
  Tensor v = x.view({3, 2});
  EXPECT_EQ(v.storage().data(), x.storage().data());
  EXPECT_EQ(v.strides(), (Shape{2, 1}));
  EXPECT_EQ(x.view({-1}).shape(), (Shape{6}));
  EXPECT_EQ(x.view({1, -1, 1}).shape(), (Shape{1, 6, 1}));
  EXPECT_THROW(x.view({4, -1}), ShapeError);
  EXPECT_THROW(x.view({-1, -1}), ShapeError);
  EXPECT_THROW(x.view({7}), ShapeError);

  Tensor t = x.t();
  std::string message = message_of<ShapeError>([&] { t.view({6}); });
  EXPECT_TRUE(contains(message, "reshape")) << message;
  EXPECT_TRUE(contains(message, "contiguous")) << message;
  EXPECT_TRUE(contains(message, "[3, 2]")) << message;

  Tensor r = t.reshape({6});
  EXPECT_NE(r.storage().data(), x.storage().data());
  EXPECT_EQ(r.to_vector<double>(), (V{0, 3, 1, 4, 2, 5}));
  Tensor rv = x.reshape({3, 2});  // viewable: no copy
  EXPECT_EQ(rv.storage().data(), x.storage().data());

  // Non-contiguous but splitting only a contiguous dim: a view is possible.
  Tensor y = iota({2, 3, 4}).transpose(0, 1);  // [3, 2, 4], strides [4, 12, 1]
  Tensor yv = y.view({3, 2, 2, 2});
  EXPECT_EQ(yv.strides(), (Shape{4, 12, 2, 1}));
  EXPECT_EQ(yv.storage().data(), y.storage().data());
  EXPECT_EQ(yv.at({2, 1, 1, 0}), y.at({2, 1, 2}));
  EXPECT_THROW(y.view({3, 8}), ShapeError);
  EXPECT_EQ(y.reshape({3, 8}).at({1, 5}), y.at({1, 1, 1}));
}

TEST(TensorTest, WritesThroughViewsReachTheBase) {
  Tensor x = Tensor::zeros({3, 4});
  x.narrow(0, 1, 1).fill_(5);
  x.select(1, 3).fill_(-1);
  x.t().slice(0, 0, 4, 2).select(1, 2).fill_(9);  // x[2, 0] and x[2, 2]
  EXPECT_EQ(x.to_vector<double>(), (V{0, 0, 0, -1, 5, 5, 5, -1, 9, 0, 9, -1}));
  Tensor v = x.view({12});
  v.data<float>()[0] = 42;
  EXPECT_EQ(x.at({0, 0}), 42);
  x.t().copy_(Tensor::arange(3).expand({4, 3}));  // column j of x.t() is row j of x
  EXPECT_EQ(x.to_vector<double>(), (V{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
}

TEST(TensorTest, EmptyFortranIsColumnMajor) {
  Tensor f = Tensor::empty_fortran({3, 4});
  EXPECT_EQ(f.strides(), (Shape{1, 3}));
  EXPECT_FALSE(f.is_contiguous());
  EXPECT_EQ(Tensor::empty_fortran({2, 3, 4}).strides(), (Shape{1, 2, 6}));
  EXPECT_TRUE(Tensor::empty_fortran({5}).is_contiguous());
  f.copy_(iota({3, 4}));
  EXPECT_EQ(f.to_vector<double>(), iota({3, 4}).to_vector<double>());
  const float* p = f.data<float>();  // memory order walks down the columns
  EXPECT_EQ(std::vector<float>(p, p + 6), (std::vector<float>{0, 4, 8, 1, 5, 9}));
  EXPECT_TRUE(f.t().is_contiguous());
}

TEST(TensorTest, ToConvertsWithRoundingAndTruncation) {
  Tensor x = Tensor::from_vector<float>({0.1f, 1.0f + 0x1p-8f, 3.14159f, 1e-3f, 1002, 1006}, {6});
  EXPECT_TRUE(x.to(DType::f32).is_same(x));
  Tensor b = x.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.element_size(), 2u);
  EXPECT_EQ(b.to(DType::f32).to_vector<double>(),
            (V{0.10009765625, 1.0, 3.140625, 0.00099945068359375, 1000, 1008}));
  EXPECT_EQ(x.to(DType::f16).to_vector<double>()[0], 0.0999755859375);

  Tensor y = Tensor::from_vector<float>({2.9f, -2.9f, 0.5f, -0.5f, 1e10f, 255.7f}, {6});
  EXPECT_EQ(y.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0, 10000000000, 255}));
  EXPECT_EQ(y.to(DType::i32).at({5}), 255);
  // Beyond the integer's range a float saturates, and NaN is 0 (C++ leaves both undefined).
  Tensor wide = Tensor::from_vector<double>({1e10, -1e10, std::nan(""), 300, -1, 2147483647.9, 1e300}, {7});
  EXPECT_EQ(wide.to(DType::i32).to_vector<int64_t>(),
            (std::vector<int64_t>{INT32_MAX, INT32_MIN, 0, 300, -1, INT32_MAX, INT32_MAX}));
  EXPECT_EQ(wide.to(DType::u8).to_vector<int64_t>(), (std::vector<int64_t>{255, 0, 0, 255, 0, 255, 255}));
  EXPECT_EQ(wide.to(DType::i64).to_vector<int64_t>()[6], INT64_MAX);
  EXPECT_EQ(y.to(DType::boolean).to_vector<double>(), (V{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(Tensor::from_vector({0, -0.0, 3}, {3}, DType::f64).to(DType::boolean).to_vector<double>(),
            (V{0, 0, 1}));
  Tensor i = Tensor::from_vector<int64_t>({-3, 16777217}, {2});
  EXPECT_EQ(i.to(DType::f64).to_vector<double>(), (V{-3, 16777217}));
  EXPECT_EQ(i.to(DType::f32).to_vector<double>(), (V{-3, 16777216}));  // 2^24 + 1 rounds to even

  // Conversion of a non-contiguous view produces a contiguous tensor in logical order.
  Tensor t = iota({2, 3}).t().to(DType::f64);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<double>(), (V{0, 3, 1, 4, 2, 5}));
}

TEST(TensorTest, Factories) {
  Tensor a = Tensor::arange(5, DType::i32);
  EXPECT_EQ(a.dtype(), DType::i32);
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  Tensor f = Tensor::full({2, 2}, 2.5, DType::f16);
  EXPECT_EQ(f.to_vector<double>(), (V{2.5, 2.5, 2.5, 2.5}));
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::bf16).at({1}), 0.10009765625);
  EXPECT_EQ(Tensor::zeros({3}, DType::i64).to_vector<double>(), (V{0, 0, 0}));
  EXPECT_EQ(Tensor::ones({2, 1}, DType::f64).to_vector<double>(), (V{1, 1}));
  EXPECT_EQ(Tensor::ones({2}, DType::boolean).to_vector<double>(), (V{1, 1}));
  Tensor v = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(v.dtype(), DType::f64);
  EXPECT_EQ(v.at({2, 1}), 6);
  Tensor w = Tensor::from_vector({1.5, -1.5}, {2}, DType::i8);
  EXPECT_EQ(w.to_vector<int8_t>(), (std::vector<int8_t>{1, -1}));
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW(Tensor::from_vector({1, 2, 3}, {4}, DType::f16), ShapeError);
}

TEST(TensorTest, ElementAccessChecksIndicesAndTypes) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(x.at({1, 2}), 5);
  std::string message = message_of<IndexError>([&] { x.at({2, 0}); });
  EXPECT_TRUE(contains(message, "index 2")) << message;
  EXPECT_TRUE(contains(message, "size 2")) << message;
  EXPECT_THROW(x.at({0, 3}), IndexError);
  EXPECT_THROW(x.at({-1, 0}), IndexError);
  EXPECT_THROW(x.at({0}), IndexError);
  EXPECT_THROW(x.at({0, 0, 0}), IndexError);
  EXPECT_THROW(x.item(), ValueError);
  EXPECT_EQ(x.narrow(1, 2, 1).narrow(0, 1, 1).item(), 5);
  EXPECT_THROW(x.data<double>(), DTypeError);
  EXPECT_THROW(x.as_strided({2, 3}, {3, 2}, 0), IndexError);  // reaches element 7 of 6
  EXPECT_THROW(x.as_strided({2}, {1, 1}, 0), ShapeError);
  EXPECT_EQ(x.as_strided({2, 2}, {1, 2}, 1).to_vector<double>(), (V{1, 3, 2, 4}));
  EXPECT_THROW(x.copy_(Tensor::zeros({3, 2})), ShapeError);
  EXPECT_THROW(Tensor::zeros({3}).copy_(Tensor::zeros({2, 3})), ShapeError);
}

TEST(TensorTest, CopyBroadcastsAndConverts) {
  Tensor dst = Tensor::zeros({2, 3}, DType::f64);
  dst.copy_(Tensor::from_vector<float>({1.5f, -2, 3}, {3}));
  EXPECT_EQ(dst.to_vector<double>(), (V{1.5, -2, 3, 1.5, -2, 3}));
  dst.copy_(Tensor::from_vector<int64_t>({7, 8}, {2, 1}));
  EXPECT_EQ(dst.to_vector<double>(), (V{7, 7, 7, 8, 8, 8}));
  dst.copy_(Tensor::scalar(-1, DType::bf16));
  EXPECT_EQ(dst.to_vector<double>(), (V{-1, -1, -1, -1, -1, -1}));
}

// Past the parallel grain, so the tiled transpose copy and the row loops are split across threads.
TEST(TensorTest, LargeCopiesBetweenLayouts) {
  int saved_threads = get_num_threads();
  set_num_threads(3);
  const int64_t m = 129, n = 257;
  Tensor x = Tensor::arange(m * n).view({m, n});
  Tensor t = x.t().contiguous();  // [n, m]
  const float* p = t.data<float>();
  int bad = 0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) bad += p[j * m + i] != static_cast<float>(i * n + j);
  EXPECT_EQ(bad, 0);

  Tensor h = Tensor::empty({n, m}, DType::f64);
  h.copy_(x.t());  // transposed and converted in one pass
  EXPECT_EQ(h.at({200, 100}), 100 * n + 200);
  EXPECT_EQ(h.at({n - 1, m - 1}), m * n - 1);

  Tensor column = Tensor::arange(m).view({m, 1});
  Tensor wide = Tensor::empty({m, n}, DType::bf16);
  wide.copy_(column);  // a stride-0 broadcast source
  std::vector<double> w = wide.to_vector<double>();
  bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) bad += w[i * n + j] != static_cast<double>(i);
  EXPECT_EQ(bad, 0);

  Tensor f = Tensor::empty_fortran({m, n});
  f.copy_(x);
  EXPECT_EQ(f.to_vector<double>(), x.to_vector<double>());
  set_num_threads(saved_threads);
}

// Sizes multiplied from flags can pass 2^64 bytes: refused by name, not wrapped to a small request.
TEST(TensorTest, ASizeBeyondSixtyFourBitsIsOutOfMemory) {
  const int64_t huge = int64_t{1} << 40;
  EXPECT_TRUE(testing::contains(testing::message_of<OutOfMemoryError>([&] { Tensor::empty({huge, huge}, DType::f32); }),
                                "a tensor [1099511627776, 1099511627776] f32 would take more than 2^64 bytes"));
}

TEST(TensorTest, PrintsLikePyTorch) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(x.to_string(), "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  std::ostringstream out;
  out << x;
  EXPECT_EQ(out.str(), x.to_string());
  EXPECT_EQ(Tensor::from_vector({1.5, -2}, {2}, DType::bf16).to_string(),
            "tensor([1.5000, -2.0000], dtype=bf16)");
  EXPECT_EQ(Tensor::arange(3, DType::i64).to_string(), "tensor([0, 1, 2], dtype=i64)");
  EXPECT_EQ(Tensor::scalar(0.5).to_string(), "tensor(0.5000)");
  EXPECT_EQ(iota({2, 2, 2}).to_string(),
            "tensor([[[0.0000, 1.0000],\n         [2.0000, 3.0000]],\n\n"
            "        [[4.0000, 5.0000],\n         [6.0000, 7.0000]]])");
  EXPECT_EQ(Tensor::from_vector<float>({1e-5f, 1}, {2}).to_string(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(Tensor::from_vector<float>({NAN, -INFINITY, 1}, {3}).to_string(), "tensor([nan, -inf, 1.0000])");
  EXPECT_EQ(Tensor::empty({0}).to_string(), "tensor([])");
  EXPECT_EQ(Tensor::empty({0, 3}).to_string(), "tensor([], size=[0, 3])");
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");

  Tensor g = Tensor::from_vector<float>({1, 2}, {2});
  g.requires_grad_();
  EXPECT_EQ(g.to_string(), "tensor([1.0000, 2.0000], requires_grad=True)");

  // Over 1000 elements: each long dim shows its first and last three entries around "...".
  Tensor big = Tensor::full({2000}, 0.5);
  EXPECT_EQ(big.to_string(), "tensor([0.5000, 0.5000, 0.5000, ..., 0.5000, 0.5000, 0.5000])");
  std::string grid = Tensor::ones({40, 40}).to_string();
  const std::string row = "[1.0000, 1.0000, 1.0000, ..., 1.0000, 1.0000, 1.0000]";
  EXPECT_EQ(grid, "tensor([" + row + ",\n        " + row + ",\n        " + row + ",\n        ...,\n        " +
                      row + ",\n        " + row + ",\n        " + row + "])");
}

TEST(RandomTest, SameSeedSameValuesDifferentSeedsDiffer) {
  Generator g1(42), g2(42), g3(43);
  std::vector<double> a = Tensor::randn({1000}, g1, DType::f64).to_vector<double>();
  std::vector<double> b = Tensor::randn({1000}, g2, DType::f64).to_vector<double>();
  std::vector<double> c = Tensor::randn({1000}, g3, DType::f64).to_vector<double>();
  EXPECT_EQ(a, b);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_EQ(same, 0);

  // The state is the whole story: restoring it replays the stream.
  auto state = g1.state();
  double next = g1.uniform();
  g1.set_state(state);
  EXPECT_EQ(g1.uniform(), next);

  manual_seed(7);
  std::vector<double> d = Tensor::rand({16}).to_vector<double>();
  manual_seed(7);
  EXPECT_EQ(Tensor::rand({16}).to_vector<double>(), d);
  // f32 draws are the f64 draws rounded.
  Generator g4(42);
  std::vector<double> f = Tensor::randn({1000}, g4, DType::f32).to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], static_cast<double>(static_cast<float>(a[i])));
}

TEST(RandomTest, RandnIsStandardNormalAndRandIsUniform) {
  Generator gen(2024);
  const int n = 100000;
  std::vector<double> z = Tensor::randn({n}, gen, DType::f64).to_vector<double>();
  double mean = 0, sq = 0;
  for (double v : z) mean += v;
  mean /= n;
  for (double v : z) sq += (v - mean) * (v - mean);
  double stddev = std::sqrt(sq / (n - 1));
  EXPECT_NEAR(mean, 0.0, 0.015);  // ~5 standard errors
  EXPECT_NEAR(stddev, 1.0, 0.01);
  int beyond_2 = 0;
  for (double v : z) beyond_2 += std::abs(v) > 2;
  EXPECT_NEAR(beyond_2 / double(n), 0.0455, 0.003);  // the normal's tails, not just its moments

  std::vector<double> u = Tensor::rand({n}, gen, DType::f64).to_vector<double>();
  double lo = 1, hi = 0, sum = 0;
  for (double v : u) lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_LT(lo, 1e-3);
  EXPECT_GT(hi, 1 - 1e-3);
}

}  // namespace
}  // namespace weft
