// exp and tanh for f32, written (and forced inline) so that GCC vectorises the loops that call
// them: libm's expf and tanhf are scalar calls, and GELU's tanh took a quarter of a GPT step.
//
// fast_exp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its degree-7 Taylor polynomial (truncation
// below 2e-8 relative), then 2^n put into the exponent bits. x is first clamped to
// [-87.3, 88] so that 2^n is a normal float: the result is never 0 or inf. NaN counts as -87.3,
// because the float-to-int conversion must never see NaN.
// fast_tanh: (e^{2x} - 1) / (e^{2x} + 1) with |x| clamped to 9 (tanh(9) is 1 in f32); NaN gives
// -1. Its error is absolute, about 1e-7 (tested): near 0 the relative error grows, which GELU,
// the one user, never sees (it adds 1 to the result and multiplies by x, which also carries NaN
// through).
// The f64 overloads are libm's, so kernels templated on their accumulation type call fast_exp
// for both.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace weft::cpu {

[[gnu::always_inline]] inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145752f, kLn2Lo = 1.42860677e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = x > -87.3f ? (x < 88.0f ? x : 88.0f) : -87.3f;
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

[[gnu::always_inline]] inline float fast_tanh(float x) {
  const float clamped = x > -9.0f ? (x < 9.0f ? x : 9.0f) : -9.0f;
  const float e = fast_exp(2 * clamped);
  return (e - 1) / (e + 1);
}

// f64 is the reference precision (gradient checks run in it): libm, exactly.
inline double fast_exp(double x) { return std::exp(x); }
inline double fast_tanh(double x) { return std::tanh(x); }

}  // namespace weft::cpu
