#include "weft/core/transpose.h"

#include <algorithm>
#include <type_traits>

#include "weft/core/error.h"
#include "weft/core/threads.h"

#include "weft/core/immintrin.h"

namespace weft {

namespace {

// A tile is 128 dst rows x 512 bytes of them (64 KiB, L2-resident on its way through).
constexpr int64_t kTileRows = 128, kTileBytes = 512;
// A result this large would only push the rest of the working set out of L3 on its way to memory:
// its cache lines are streamed (non-temporal stores), which also saves reading them in first.
constexpr int64_t kStreamBytes = int64_t{16} << 20;
// The staged rows are 32 or 64 streams at once, more than the hardware prefetcher follows: each
// row's line two ahead is asked for by hand (measured 2x faster than none, and than 4 or 8 ahead).
constexpr int64_t kPrefetchLines = 2;

template <size_t kBytes>
using Bits = std::conditional_t<kBytes == 1, uint8_t,
                                std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

// dst[i][j] = src[j][i] for i in [i0, i1), j in [j0, j1); strides in elements.
template <size_t kBytes>
void plain_block(char* dst_bytes, const char* src_bytes, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t ldd,
                 int64_t lds) {
  using T = Bits<kBytes>;
  T* dst = reinterpret_cast<T*>(dst_bytes);
  const T* src = reinterpret_cast<const T*>(src_bytes);
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) dst[i * ldd + j] = src[i + j * lds];
}

#ifdef __AVX512F__

// 16 vectors of 16 32-bit words, transposed: afterwards word k of r[w] is what word w of r[k] was.
inline void transpose_words(__m512i r[16]) {
  __m512i t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    r[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q) {
      t[8 * h + q] = _mm512_shuffle_i32x4(r[8 * h + q], r[8 * h + 4 + q], 0x88);
      t[8 * h + 4 + q] = _mm512_shuffle_i32x4(r[8 * h + q], r[8 * h + 4 + q], 0xdd);
    }
  for (int q = 0; q < 8; ++q) {
    r[q] = _mm512_shuffle_i32x4(t[q], t[8 + q], 0x88);
    r[8 + q] = _mm512_shuffle_i32x4(t[q], t[8 + q], 0xdd);
  }
}

// 8 vectors of 8 64-bit words, transposed the same way.
inline void transpose_quads(__m512i r[8]) {
  __m512i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm512_unpacklo_epi64(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi64(r[2 * k], r[2 * k + 1]);
  }
  for (int odd = 0; odd < 2; ++odd) {
    u[4 * odd] = _mm512_shuffle_i64x2(t[odd], t[2 + odd], 0x88);
    u[4 * odd + 1] = _mm512_shuffle_i64x2(t[4 + odd], t[6 + odd], 0x88);
    u[4 * odd + 2] = _mm512_shuffle_i64x2(t[odd], t[2 + odd], 0xdd);
    u[4 * odd + 3] = _mm512_shuffle_i64x2(t[4 + odd], t[6 + odd], 0xdd);
  }
  for (int odd = 0; odd < 2; ++odd) {
    r[odd] = _mm512_shuffle_i64x2(u[4 * odd], u[4 * odd + 1], 0x88);
    r[4 + odd] = _mm512_shuffle_i64x2(u[4 * odd], u[4 * odd + 1], 0xdd);
    r[2 + odd] = _mm512_shuffle_i64x2(u[4 * odd + 2], u[4 * odd + 3], 0x88);
    r[6 + odd] = _mm512_shuffle_i64x2(u[4 * odd + 2], u[4 * odd + 3], 0xdd);
  }
}

// One block: dst rows i..i+15 (8 for 8-byte elements), 64 bytes of each, from the src rows
// holding those bytes. Pointers are at the block's first element; strides in bytes.
template <size_t kBytes>
void vector_block(char* dst, const char* src, int64_t ldd, int64_t lds, bool stream) {
  constexpr int kRows = kBytes == 8 ? 8 : 16;
  __m512i r[16];
  if constexpr (kBytes == 8 || kBytes == 4) {
    for (int k = 0; k < kRows; ++k) r[k] = _mm512_loadu_si512(src + k * lds);
  } else if constexpr (kBytes == 2) {  // src rows 2k and 2k + 1 side by side in each word
    for (int k = 0; k < 16; ++k) {
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * k * lds)));
      const __m512i hi =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (2 * k + 1) * lds)));
      r[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
  } else {  // src rows 4k .. 4k + 3 in the four bytes of each word
    for (int k = 0; k < 16; ++k) {
      __m512i word = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q)
        word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                           reinterpret_cast<const __m128i*>(src + (4 * k + q) * lds))),
                                                       8 * q));
      r[k] = word;
    }
  }
  if constexpr (kBytes == 8) transpose_quads(r);
  else transpose_words(r);
  for (int k = 0; k < kRows; ++k) {
    void* line = dst + k * ldd;
    if (stream) _mm512_stream_si512(static_cast<__m512i*>(line), r[k]);
    else _mm512_storeu_si512(line, r[k]);
  }
}

#endif

// One tile [i0, i1) x [j0, j1) of one matrix; `stream` only when every dst line of a block is
// 64-byte aligned.
template <size_t kBytes>
void copy_tile(char* dst, const char* src, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t ldd, int64_t lds,
               bool stream) {
#ifdef __AVX512F__
  constexpr int64_t block_rows = kBytes == 8 ? 8 : 16, block_cols = 64 / kBytes;
  const int64_t i_full = i0 + (i1 - i0) / block_rows * block_rows, j_full = j0 + (j1 - j0) / block_cols * block_cols;
  // A block of 2- or 1-byte elements reads only half or a quarter of each src cache line, and its
  // 32 or 64 src rows, a power-of-two stride apart in a typical matrix, share a few L1 sets: the
  // lines are gone before the next block wants their other part. So whole lines of those rows are
  // first copied into a small aligned buffer, and the blocks read that. Blocks go down dst's
  // columns (i inner), so consecutive ones read consecutive lines of the same src rows.
  constexpr int64_t line = 64 / kBytes;
  alignas(64) char staged[block_cols][64];
  for (int64_t j = j0; j < j_full; j += block_cols) {
    int64_t i = i0;
    if constexpr (kBytes < 4) {
      for (; i + line <= i_full; i += line) {
        for (int64_t r = 0; r < block_cols; ++r) {
          const char* row = src + (i + (j + r) * lds) * kBytes;
          _mm_prefetch(row + kPrefetchLines * 64, _MM_HINT_T0);
          _mm512_store_si512(staged[r], _mm512_loadu_si512(row));
        }
        for (int64_t part = 0; part < line; part += block_rows)
          vector_block<kBytes>(dst + ((i + part) * ldd + j) * kBytes, staged[0] + part * kBytes, ldd * kBytes, 64,
                               stream);
      }
    }
    for (; i < i_full; i += block_rows)
      vector_block<kBytes>(dst + (i * ldd + j) * kBytes, src + (i + j * lds) * kBytes, ldd * kBytes, lds * kBytes,
                           stream);
  }
  plain_block<kBytes>(dst, src, i0, i_full, j_full, j1, ldd, lds);
  plain_block<kBytes>(dst, src, i_full, i1, j0, j1, ldd, lds);
#else
  (void)stream;
  plain_block<kBytes>(dst, src, i0, i1, j0, j1, ldd, lds);
#endif
}

inline void fence_streams() {
#ifdef __AVX512F__
  _mm_sfence();  // non-temporal stores are weakly ordered: make them visible before returning
#endif
}

template <size_t kBytes>
void copy_all(char* dst, const char* src, const TransposedMatrices& m) {
  const int64_t matrices = static_cast<int64_t>(m.dst_offsets.size());
  const int64_t tile_cols = kTileBytes / static_cast<int64_t>(kBytes);
  const int64_t tiles_down = (m.rows + kTileRows - 1) / kTileRows, tiles_across = (m.cols + tile_cols - 1) / tile_cols;
  const int64_t tiles = tiles_down * tiles_across;
  const int64_t elements = matrices * m.rows * m.cols;
  const bool stream = elements * static_cast<int64_t>(kBytes) >= kStreamBytes &&
                      m.dst_row_stride * static_cast<int64_t>(kBytes) % 64 == 0;
  auto one_tile = [&](int64_t task) {
    const int64_t b = task / tiles, t = task % tiles;
    const int64_t i0 = t / tiles_across * kTileRows, j0 = t % tiles_across * tile_cols;
    char* d = dst + m.dst_offsets[b] * static_cast<int64_t>(kBytes);
    const char* s = src + m.src_offsets[b] * static_cast<int64_t>(kBytes);
    copy_tile<kBytes>(d, s, i0, std::min(i0 + kTileRows, m.rows), j0, std::min(j0 + tile_cols, m.cols),
                      m.dst_row_stride, m.src_row_stride, stream && reinterpret_cast<uintptr_t>(d) % 64 == 0);
  };
  parallel_for(matrices * tiles, elements >= kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) one_tile(task);
    fence_streams();
  });
}

void check(size_t element_bytes, const TransposedMatrices& m) {
  WEFT_CHECK(element_bytes == 1 || element_bytes == 2 || element_bytes == 4 || element_bytes == 8, ValueError,
             "copy_transposed: elements of 1, 2, 4 or 8 bytes, got ", element_bytes);
  WEFT_CHECK(m.dst_offsets.size() == m.src_offsets.size(), ValueError, "copy_transposed: ", m.dst_offsets.size(),
             " dst offsets but ", m.src_offsets.size(), " src offsets");
}

}  // namespace

void copy_transposed(void* dst, const void* src, size_t element_bytes, const TransposedMatrices& m) {
  check(element_bytes, m);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  switch (element_bytes) {
    case 1: return copy_all<1>(d, s, m);
    case 2: return copy_all<2>(d, s, m);
    case 4: return copy_all<4>(d, s, m);
    default: return copy_all<8>(d, s, m);
  }
}

namespace reference {

void copy_transposed(void* dst, const void* src, size_t element_bytes, const TransposedMatrices& m) {
  check(element_bytes, m);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const int64_t n = static_cast<int64_t>(element_bytes);
  for (size_t b = 0; b < m.dst_offsets.size(); ++b)
    for (int64_t i = 0; i < m.rows; ++i)
      for (int64_t j = 0; j < m.cols; ++j)
        std::copy_n(s + (m.src_offsets[b] + i + j * m.src_row_stride) * n, n,
                    d + (m.dst_offsets[b] + i * m.dst_row_stride + j) * n);
}

}  // namespace reference

}  // namespace weft
