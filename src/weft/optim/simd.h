// What the optimizers' fused passes (adam.cpp, sgd.cpp) share: mul_add, their one rounding rule,
// and Vec<T>, the few AVX-512 operations their vector loops use (f32: 16 lanes, f64: 8).
//
// Rounding is part of an update's specification, so none of it is left to the compiler: optim/ is
// built with -ffp-contract=off (CMakeLists.txt), and every fused multiply-add is written out as
// mul_add. Where the CPU has FMA, mul_add rounds once, which is what GCC's default contraction
// made of these same expressions in the per-parameter loops the fused passes replaced (read off
// their compiled code); without FMA it rounds twice, as those builds did. A vector loop and its
// scalar reference then agree bit for bit: the same operations, each correctly rounded.
#pragma once
#include <cmath>
#include <cstdint>

#include "weft/core/dtype.h"
#include "weft/core/immintrin.h"

namespace weft::optim {

// a * b + c.
template <typename T>
inline T mul_add(T a, T b, T c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

#ifdef __AVX512F__
template <typename T>
struct Vec;

template <>
struct Vec<float> {
  using Reg = __m512;
  static constexpr int64_t kLanes = 16;
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  // 16-bit grads of master weights, widened exactly (what convert<float> gives).
  static Reg load(const BFloat16* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  static Reg load(const Half* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg sqrt(Reg a) { return _mm512_sqrt_ps(a); }
  static Reg mul_add(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
};

template <>
struct Vec<double> {
  using Reg = __m512d;
  static constexpr int64_t kLanes = 8;
  static Reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, Reg x) { _mm512_storeu_pd(p, x); }
  static Reg set1(double x) { return _mm512_set1_pd(x); }
  static Reg add(Reg a, Reg b) { return _mm512_add_pd(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_pd(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_pd(a, b); }
  static Reg sqrt(Reg a) { return _mm512_sqrt_pd(a); }
  static Reg mul_add(Reg a, Reg b, Reg c) { return _mm512_fmadd_pd(a, b, c); }
};
#endif

}  // namespace weft::optim
