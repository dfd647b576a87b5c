// exp of 16 floats at once with AVX-512, for the softmax inside fused attention (kernels/cpu/
// attention.cpp), which needs one exponential per score in the forward and again in the backward.
// GCC only calls libm's vector expf under -ffast-math, which weft does not build with.
//
// The method is Cephes' expf: x = n ln 2 + r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2
// split in two constants so n ln 2 is exact enough), e^r by a degree-7 polynomial, and the result
// scaled by 2^n with vscalefps, which also rounds to subnormals and zero below 2^-126 as libm does.
// Against std::exp in f32: within 2 ulp for normal results (tests/kernels/test_exp_avx512.cpp),
// exp(-inf) = 0, exp(+inf) = +inf above 88.72 (overflow), NaN stays NaN.
//
// Only defined where the compiler targets AVX-512 (weft builds with -march=native by default).
#pragma once
#ifdef __AVX512F__
// GCC 12's AVX-512 headers start broadcasts from _mm512_undefined_ps(), which -Wuninitialized
// reports wherever they are inlined (GCC bug 105593, fixed in GCC 13); the diagnostic is keyed to
// the header's lines, so silencing it around the include covers every caller.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace weft::cpu {

inline __m512 exp_avx512(__m512 x) {
  // Below -103.98 the result is zero in f32 anyway; clamping keeps n finite so -inf gives 0, not
  // the NaN of -inf - (-inf) ln 2. _mm512_max_ps returns its second operand if either is NaN.
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln 2's high part: n * it is exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace weft::cpu
#endif
