#include "weft/kernels/cpu/weight_only.h"

#include <cstring>

#include "weft/core/immintrin.h"
#include "weft/kernels/cpu/matmul.h"

namespace weft::cpu {

void check_int8_weight(const char* what, const Tensor& q, const Tensor& scales, const Tensor& bias, int64_t in_features) {
  WEFT_CHECK(q.defined() && scales.defined(), ValueError, what, ": undefined weight or scales");
  WEFT_CHECK(q.dtype() == DType::i8 && q.dim() == 2 && q.size(1) == in_features, ShapeError, what,
             ": expected an i8 weight [N, ", in_features, "], got ", dtype_name(q.dtype()), " ", shape_str(q.shape()));
  WEFT_CHECK(scales.dtype() == DType::f32 && scales.shape() == Shape{q.size(0)}, ShapeError, what,
             ": expected f32 scales [", q.size(0), "] (one per output row), got ", dtype_name(scales.dtype()), " ",
             shape_str(scales.shape()));
  WEFT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{q.size(0)}), ShapeError, what,
             ": expected an f32 bias [", q.size(0), "], got ", dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
}

namespace {

void check_x(const Tensor& x, const Tensor& q, const Tensor& scales, const Tensor& bias) {
  const char* what = "int8_weight_only_linear";
  WEFT_CHECK(x.defined(), ValueError, what, ": undefined input");
  WEFT_CHECK(x.dtype() == DType::f32 && x.dim() == 2, DTypeError, what, ": expected an f32 input [M, K], got ",
             dtype_name(x.dtype()), " ", shape_str(x.shape()));
  check_int8_weight(what, q, scales, bias, x.size(1));
}

// The rows of x times one weight row decoded into a per-thread f32 buffer: where AVX-512 is not.
template <typename Decode>
void decoded_row_dots(Decode&& decode, const float* x, int64_t K, int64_t M, float* out) {
  static thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(K));
  decode(row.data());
  dot_rows(row.data(), x, K, M, out);
}

#ifdef __AVX512F__
// out[m] = the sum of acc[m]'s lanes.
void store_sums(const __m512* acc, int64_t M, float* out) {
  for (int64_t m = 0; m < M; ++m) out[m] = _mm512_reduce_add_ps(acc[m]);
}
#endif

}  // namespace

void dot_rows(const float* w, const float* x, int64_t K, int64_t M, float* out) {
  int64_t k = 0;
#ifdef __AVX512F__
  __m512 acc[kFusedRows];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (; k + 16 <= K; k += 16) {
    const __m512 wv = _mm512_loadu_ps(w + k);
    for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + m * K + k), acc[m]);
  }
  store_sums(acc, M, out);
#else
  for (int64_t m = 0; m < M; ++m) out[m] = 0.0f;
#endif
  for (; k < K; ++k)
    for (int64_t m = 0; m < M; ++m) out[m] += w[k] * x[m * K + k];
}

void int8_row_dots(const int8_t* q, float scale, const float* x, int64_t K, int64_t M, float* out) {
#ifdef __AVX512F__
  __m512 acc[kFusedRows];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k))));
    for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + m * K + k), acc[m]);
  }
  store_sums(acc, M, out);
  for (; k < K; ++k)
    for (int64_t m = 0; m < M; ++m) out[m] += static_cast<float>(q[k]) * x[m * K + k];
  for (int64_t m = 0; m < M; ++m) out[m] *= scale;
#else
  decoded_row_dots([&](float* row) { for (int64_t k = 0; k < K; ++k) row[k] = scale * static_cast<float>(q[k]); },
                   x, K, M, out);
#endif
}

void int4_row_dots(const uint8_t* packed, const float* scales, int64_t group_size, const float* x, int64_t K,
                   int64_t M, float* out) {
  auto value = [&](int64_t k) {
    const int32_t nibble = (k & 1) ? packed[k / 2] >> 4 : packed[k / 2] & 0xF;
    return scales[k / group_size] * static_cast<float>((nibble ^ 8) - 8);
  };
#ifdef __AVX512F__
  if (group_size % 16 == 0) {  // each run of 16 weights within one group: one scale
    __m512 acc[kFusedRows];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0F);
    // The 16 values a nibble stands for (0..7, then -8..-1), times the group's scale: one
    // permutation turns 16 nibbles into 16 scaled weights.
    const __m512 values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    __m512 table = values;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      if (k % group_size == 0) table = _mm512_mul_ps(values, _mm512_set1_ps(scales[k / group_size]));
      uint64_t bytes;
      std::memcpy(&bytes, packed + k / 2, sizeof bytes);
      const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(bytes));
      // Element 2j is byte j's low nibble, 2j + 1 its high one: interleave them.
      const __m128i nibbles = _mm_unpacklo_epi8(_mm_and_si128(b, low4), _mm_and_si128(_mm_srli_epi16(b, 4), low4));
      const __m512 w = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nibbles), table);
      for (int64_t m = 0; m < M; ++m) acc[m] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + m * K + k), acc[m]);
    }
    store_sums(acc, M, out);
    for (; k < K; ++k)
      for (int64_t m = 0; m < M; ++m) out[m] += value(k) * x[m * K + k];
    return;
  }
#endif
  decoded_row_dots([&](float* row) { for (int64_t k = 0; k < K; ++k) row[k] = value(k); }, x, K, M, out);
}

Tensor int8_weight_only_linear(const Tensor& x, const Tensor& q, const Tensor& scales, const Tensor& bias) {
  check_x(x, q, scales, bias);
  const int64_t N = q.size(0), K = q.size(1);
  Tensor qc = q.contiguous_untracked(), sc = scales.contiguous_untracked();
  const int8_t* qs = qc.data<int8_t>();
  const float* ss = sc.data<float>();
  if (x.size(0) <= kFusedRows)
    return fused_weight_only_linear(x, N, bias, [&](int64_t n, const float* xs, int64_t rows, float* out) {
      int8_row_dots(qs + n * K, ss[n], xs, K, rows, out);
    });
  Tensor w = Tensor::empty({N, K}, DType::f32);
  float* ws = w.data<float>();
  parallel_for(N, N * K >= kParallelGrain, [&](int64_t n_begin, int64_t n_end) {
    for (int64_t n = n_begin; n < n_end; ++n)
      for (int64_t k = 0; k < K; ++k) ws[n * K + k] = ss[n] * static_cast<float>(qs[n * K + k]);
  });
  // w's transpose as a raw strided view: Tensor::t() belongs to ops (it records for autograd).
  return matmul(x, w.as_strided({K, N}, {w.stride(1), w.stride(0)}, w.storage_offset()), bias);
}

namespace reference {

Tensor int8_weight_only_linear(const Tensor& x, const Tensor& q, const Tensor& scales, const Tensor& bias) {
  check_x(x, q, scales, bias);
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  std::vector<double> xs = x.to_vector<double>(), qs = q.to_vector<double>(), ss = scales.to_vector<double>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(N, 0.0);
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += xs[m * K + k] * qs[n * K + k];
      y[m * N + n] = acc * ss[n] + b[n];
    }
  return Tensor::from_vector(y, {M, N}, DType::f32);
}

}  // namespace reference

}  // namespace weft::cpu
