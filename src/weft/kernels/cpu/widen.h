// Sixteen elements at a time between a storage type and f32, for the vector loops of kernels
// that compute in f32 whatever they store. GCC 12 vectorises a loop that widens bf16 as it reads
// (or rounds to bf16 as it writes) at half width, two 8-lane halves per 16 elements, which ran
// cross-entropy on bf16 logits 1.7x slower than on f32 ones; with one AVX-512 widening load (and
// one rounding store) per 16 elements the loop between stays at 16 lanes. The values are exactly
// convert<float>'s and convert<BFloat16>'s (round to nearest even, NaN kept quiet). Other types, and
// machines without AVX-512, take the plain element loop.
#pragma once
#include <cstdint>

#include "weft/core/convert.h"
#include "weft/core/immintrin.h"

namespace weft::cpu {

constexpr int64_t kWidenLanes = 16;

template <typename T>
[[gnu::always_inline]] inline void widen16(const T* x, float* w) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
    _mm512_storeu_ps(w, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    return;
  }
#endif
  for (int64_t j = 0; j < kWidenLanes; ++j) w[j] = static_cast<float>(x[j]);
}

template <typename T>
[[gnu::always_inline]] inline void narrow16(const float* w, T* y) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(w));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x0040));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet)));
    return;
  }
#endif
  for (int64_t j = 0; j < kWidenLanes; ++j) y[j] = convert<T>(w[j]);
}

}  // namespace weft::cpu
