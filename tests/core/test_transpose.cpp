// The blocked transpose copy against its plain reference loop, over sizes that do and do not fill
// its blocks and tiles, every element size, batches, padded strides and offsets; and contiguous()
// of transposed views, which lands on it, for every dtype.
#include "weft/core/transpose.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/core/threads.h"

namespace weft {
namespace {

struct Case {
  int64_t rows, cols;
  int64_t dst_pad = 0, src_pad = 0;  // extra elements at the end of each row
  int64_t matrices = 1;
  int64_t dst_start = 0, src_start = 0;  // offset of the first matrix, in elements
};

// Runs the fast copy and the reference on the same pseudo-random src into dst buffers filled with
// the same sentinel, and compares the whole buffers: what lies between the rows must be untouched.
void expect_matches_reference(size_t bytes, const Case& c) {
  TransposedMatrices m{.rows = c.rows, .cols = c.cols, .dst_row_stride = c.cols + c.dst_pad,
                       .src_row_stride = c.rows + c.src_pad, .dst_offsets = {}, .src_offsets = {}};
  const int64_t dst_matrix = c.rows * m.dst_row_stride, src_matrix = c.cols * m.src_row_stride;
  for (int64_t b = 0; b < c.matrices; ++b) {
    // The batch walks backwards through src, as a permuted outer dim would.
    m.dst_offsets.push_back(c.dst_start + b * dst_matrix);
    m.src_offsets.push_back(c.src_start + (c.matrices - 1 - b) * src_matrix);
  }
  std::vector<uint8_t> src((c.src_start + c.matrices * src_matrix) * bytes);
  uint32_t state = 12345;
  for (uint8_t& v : src) v = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  const size_t dst_bytes = (c.dst_start + c.matrices * dst_matrix) * bytes;
  std::vector<uint8_t> fast(dst_bytes, 0xA5), ref(dst_bytes, 0xA5);
  copy_transposed(fast.data(), src.data(), bytes, m);
  reference::copy_transposed(ref.data(), src.data(), bytes, m);
  EXPECT_TRUE(fast == ref) << bytes << "-byte elements, " << c.matrices << " x [" << c.rows << ", " << c.cols
                           << "], pads " << c.dst_pad << "/" << c.src_pad << ", starts " << c.dst_start << "/"
                           << c.src_start;
}

TEST(TransposeCopy, MatchesTheReferenceLoop) {
  const std::vector<Case> cases = {
      {1, 1},          {1, 300},        {300, 1},     {15, 17},      {16, 16},           {64, 64},
      {8, 8},          {17, 9},         {33, 65},     {130, 600},    {257, 129, 3, 5},   {40, 70, 0, 0, 4},
      {31, 95, 2, 1, 3, 7, 5},          {200, 300},  // past the parallel grain
  };
  for (size_t bytes : {1, 2, 4, 8})
    for (const Case& c : cases) expect_matches_reference(bytes, c);
}

TEST(TransposeCopy, OneThreadAndManyAgree) {
  const int saved = get_num_threads();
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    for (size_t bytes : {1, 2, 4, 8}) expect_matches_reference(bytes, {300, 170, 1, 0, 2});
  }
  set_num_threads(saved);
}

// 16 MiB and more are streamed past the caches, when the dst rows are 64-byte aligned.
TEST(TransposeCopy, LargeResultsStreamed) {
  expect_matches_reference(4, {2048, 2048});
  expect_matches_reference(4, {2048, 2048, 0, 0, 1, 3, 0});  // misaligned start: ordinary stores
  expect_matches_reference(2, {2048, 4096, 32, 16});
}

TEST(TransposeCopy, RefusesOtherElementSizes) {
  TransposedMatrices m{.rows = 2, .cols = 2, .dst_row_stride = 2, .src_row_stride = 2};
  std::vector<uint8_t> src(48), dst(48);
  EXPECT_THROW(copy_transposed(dst.data(), src.data(), 3, m), ValueError);
  m.src_offsets = {0, 4};
  EXPECT_THROW(copy_transposed(dst.data(), src.data(), 4, m), ValueError);
}

// contiguous() of x, checked element by element against x.at().
void expect_contiguous_copy(const Tensor& x) {
  Tensor c = x.contiguous();
  ASSERT_TRUE(c.is_contiguous());
  ASSERT_EQ(c.shape(), x.shape());
  std::vector<double> got = c.to_vector<double>();
  std::vector<int64_t> index(x.dim(), 0);
  for (int64_t k = 0; k < x.numel(); ++k) {
    ASSERT_EQ(got[k], x.at(index)) << "element " << k << " of " << shape_str(x.shape()) << " "
                                   << dtype_name(x.dtype());
    for (int64_t d = x.dim() - 1; d >= 0 && ++index[d] == x.shape()[d]; --d) index[d] = 0;
  }
}

TEST(TransposeCopy, ContiguousOfTransposedViewsInEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::u8, DType::i32, DType::i64,
                      DType::boolean}) {
    // Small integers, exact in every dtype; bool sees 0 / 1.
    auto values = [&](const Shape& shape) {
      Tensor t = Tensor::arange(numel(shape)).view(shape);
      std::vector<double> v = t.to_vector<double>();
      for (double& e : v) e = dtype == DType::boolean ? static_cast<double>(static_cast<int64_t>(e) % 3 == 0)
                                                    : static_cast<double>(static_cast<int64_t>(e) % 97 - 48);
      return Tensor::from_vector(v, shape, dtype);
    };
    expect_contiguous_copy(values({37, 70}).t());
    expect_contiguous_copy(values({1, 50}).t());
    expect_contiguous_copy(values({3, 37, 70}).transpose(1, 2));                          // batched
    expect_contiguous_copy(values({5, 40, 90}).narrow(2, 3, 66).slice(0, 0, 5, 2).transpose(1, 2));  // offset, strides
    expect_contiguous_copy(values({2, 3, 20, 30}).transpose(2, 3).transpose(0, 1));        // permuted batch dims
  }
}

}  // namespace
}  // namespace weft
