// Weight-only quantized linear layers: the weight is stored in 8 or 4 bits, activations stay f32,
// and y = x @ w^T + bias.
//
// int8, per output channel: q i8 [N, K], scales f32 [N], and w[n, k] = scales[n] * q[n, k]
// (quant/weights.h makes them). int4 is kernels/cpu/int4.h's layout (groups of input features).
//
// Decoding a language model runs these at a few rows (one per sequence) and is bound by reading
// the weight: at M <= kFusedRows rows each thread takes a range of output rows and, for each,
// reads the row in its stored bytes (1, or 0.5 plus the scales, per weight), widens 16 weights at
// a time in registers and multiplies them into every x row at once (AVX-512; elsewhere a row at a
// time into an f32 buffer that stays in L1), so the weight is read once and never written out as
// f32. At more rows (a prompt's prefill) the arithmetic dominates: the weight is expanded to f32
// once per call and oneDNN's f32 GEMM runs.
//
#pragma once
#include <algorithm>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/core/threads.h"

namespace weft::cpu {

inline constexpr int64_t kFusedRows = 8;

// ShapeError / DTypeError / ValueError unless q i8 [N, in_features], scales f32 [N] and bias (f32
// [N] or undefined) make a layer; `what` names the caller.
void check_int8_weight(const char* what, const Tensor& q, const Tensor& scales, const Tensor& bias, int64_t in_features);
// x f32 [M, K], q i8 [N, K], scales f32 [N], bias f32 [N] or undefined → f32 [M, N].
Tensor int8_weight_only_linear(const Tensor& x, const Tensor& q, const Tensor& scales, const Tensor& bias);

// The fused path for any M (the tests call it where the dispatch would not): y[m, n] = bias[n] +
// out[m], where `dots(n, x, rows, out)` writes out[m] = dot(weight row n, x row m) for the
// rows <= kFusedRows x rows at x (each K floats, contiguous).
template <typename Dots>
Tensor fused_weight_only_linear(const Tensor& x, int64_t N, const Tensor& bias, Dots&& dots);

// out[m] = dot(w, x + m K) over K floats, for m < M <= kFusedRows: w is read once for all M.
void dot_rows(const float* w, const float* x, int64_t K, int64_t M, float* out);
// The same for one stored weight row: int8 (K values and the row's scale), or int4 (ceil(K / 2)
// packed bytes and a scale per group_size).
void int8_row_dots(const int8_t* q, float scale, const float* x, int64_t K, int64_t M, float* out);
void int4_row_dots(const uint8_t* packed, const float* scales, int64_t group_size, const float* x, int64_t K,
                   int64_t M, float* out);

namespace reference {
Tensor int8_weight_only_linear(const Tensor& x, const Tensor& q, const Tensor& scales, const Tensor& bias);
}  // namespace reference

template <typename Dots>
Tensor fused_weight_only_linear(const Tensor& x, int64_t N, const Tensor& bias, Dots&& dots) {
  const int64_t M = x.size(0), K = x.size(1);
  Tensor xc = x.contiguous_untracked();
  const float* xs = xc.data<float>();
  Tensor bc = bias.defined() ? bias.contiguous_untracked() : Tensor();
  const float* b = bc.defined() ? bc.data<float>() : nullptr;
  Tensor y = Tensor::empty({M, N}, DType::f32);
  float* ys = y.data<float>();
  parallel_for(N, N * K >= kParallelGrain, [&](int64_t n_begin, int64_t n_end) {
    float out[kFusedRows];
    for (int64_t n = n_begin; n < n_end; ++n)
      for (int64_t m0 = 0; m0 < M; m0 += kFusedRows) {
        const int64_t rows = std::min(kFusedRows, M - m0);
        dots(n, xs + m0 * K, rows, out);
        for (int64_t m = 0; m < rows; ++m) ys[(m0 + m) * N + n] = out[m] + (b ? b[n] : 0.0f);
      }
  });
  return y;
}

}  // namespace weft::cpu
