// Strided iteration shared by every elementwise loop (copy, casts, arithmetic, reductions).
//
// for_each_row walks N operands that have the same shape (broadcast operands carry stride 0)
// row by row: it first merges dimensions that are laid out back to back in every operand and
// drops size-1 dimensions, so a contiguous tensor of any rank becomes a single row. Rows are
// split across OpenMP threads when there are enough elements.
#pragma once
#include <algorithm>
#include <array>
#include <vector>
#include <cstdint>
#include <omp.h>

#include "weft/core/shape.h"
#include "weft/core/threads.h"

namespace weft {

template <size_t N>
struct StridedLayout {
  Shape shape;                      // after merging
  std::array<Shape, N> strides;     // per operand, same rank as shape
};

template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<Shape, N>& strides) {
  // Visit dims in operand 0's memory order (largest stride first), so a transposed output is
  // still walked along its contiguous dim; every operand gets the same permutation.
  std::vector<size_t> order(shape.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    for (size_t k = 0; k < N; ++k)
      if (strides[k][x] != strides[k][y]) return strides[k][x] > strides[k][y];
    return false;
  });
  StridedLayout<N> out;
  for (size_t d : order) {
    if (shape[d] == 1) continue;
    bool merge = !out.shape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = out.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) out.strides[k].back() = strides[k][d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) out.strides[k].push_back(strides[k][d]);
    }
  }
  if (out.shape.empty()) {  // a single element
    out.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(1);
  }
  return out;
}

// row_fn(offsets, n, inner_strides): offsets[k] is operand k's element offset of the row start.
template <size_t N, typename RowFn>
void for_each_row(const Shape& shape, const std::array<Shape, N>& strides, RowFn&& row_fn) {
  if (numel(shape) == 0) return;
  StridedLayout<N> layout = coalesce<N>(shape, strides);
  const int64_t ndim = static_cast<int64_t>(layout.shape.size());
  const int64_t inner = layout.shape.back();
  const int64_t rows = numel(layout.shape) / inner;
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = layout.strides[k].back();
  auto run = [&](int64_t row_begin, int64_t row_end) {
    std::array<int64_t, N> offsets{};
    Shape index(ndim - 1);
    int64_t r = row_begin;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      index[d] = r % layout.shape[d];
      r /= layout.shape[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * layout.strides[k][d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      row_fn(offsets, inner, inner_strides);
      for (int64_t d = ndim - 2; d >= 0; --d) {  // advance the multi-index like an odometer
        for (size_t k = 0; k < N; ++k) offsets[k] += layout.strides[k][d];
        if (++index[d] < layout.shape[d]) break;
        for (size_t k = 0; k < N; ++k) offsets[k] -= index[d] * layout.strides[k][d];
        index[d] = 0;
      }
    }
  };
  const int64_t total = rows * inner;
  if (total < kParallelGrain || get_num_threads() == 1) {
    run(0, rows);
    return;
  }
  if (rows == 1) {  // one long row: split it instead
#pragma omp parallel
    {
      int threads = omp_get_num_threads(), id = omp_get_thread_num();
      int64_t chunk = (inner + threads - 1) / threads;
      int64_t begin = std::min<int64_t>(inner, id * chunk), end = std::min<int64_t>(inner, begin + chunk);
      if (end > begin) {
        std::array<int64_t, N> offsets;
        for (size_t k = 0; k < N; ++k) offsets[k] = begin * inner_strides[k];
        row_fn(offsets, end - begin, inner_strides);
      }
    }
    return;
  }
#pragma omp parallel
  {
    int threads = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t chunk = (rows + threads - 1) / threads;
    int64_t begin = std::min<int64_t>(rows, id * chunk), end = std::min<int64_t>(rows, begin + chunk);
    if (end > begin) run(begin, end);
  }
}

}  // namespace weft
