// The copy behind contiguous() of a transposed view: dst[i][j] = src[j][i], for one matrix or a
// batch of them, elements of 1, 2, 4 or 8 bytes copied bit for bit.
//
// A row-by-row loop reads src down a column, one cache line per element, and runs at a sixth of
// memcpy's bandwidth. This one walks the matrix in tiles of 128 dst rows x 512 bytes that sit in
// L1/L2 and moves each tile in blocks of 16 rows x 64 bytes: with AVX-512 a block is loaded as 16
// vectors, transposed in registers (4-byte words; 2- and 1-byte elements are first packed two or
// four src rows to a word, 8-byte ones use an 8 x 8 transpose) and stored as 16 full cache lines,
// streamed past the caches when the result is too large to stay in them. Edges that do not fill
// a block, and builds without AVX-512, take a plain tiled loop.
//
// reference::copy_transposed is the plain loop the tests hold the fast path to.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft {

// Matrices of rows x cols (dst's shape), all with the same strides, in elements: dst rows are
// dst_row_stride apart with contiguous columns; src holds the transpose, its rows (dst's columns)
// src_row_stride apart and contiguous. Matrix b starts at dst_offsets[b] / src_offsets[b].
struct TransposedMatrices {
  int64_t rows = 0, cols = 0;
  int64_t dst_row_stride = 0, src_row_stride = 0;
  std::vector<int64_t> dst_offsets{0}, src_offsets{0};
};

// element_bytes is 1, 2, 4 or 8. Splits the work across threads when there is enough of it.
void copy_transposed(void* dst, const void* src, size_t element_bytes, const TransposedMatrices& m);

namespace reference {
void copy_transposed(void* dst, const void* src, size_t element_bytes, const TransposedMatrices& m);
}  // namespace reference

}  // namespace weft
