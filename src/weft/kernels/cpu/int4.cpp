#include "weft/kernels/cpu/int4.h"

#include <algorithm>

#include "weft/core/threads.h"
#include "weft/kernels/cpu/matmul.h"
#include "weft/kernels/cpu/weight_only.h"

namespace weft::cpu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The signed value of the nibble of `byte` that holds element k.
inline int32_t nibble(uint8_t byte, int64_t k) {
  const int32_t v = (k & 1) ? byte >> 4 : byte & 0xF;
  return v >= 8 ? v - 16 : v;
}

// One weight row of K elements, scaled, from its bytes and its groups' scales.
void decode_row(const uint8_t* row, const float* scale, int64_t K, int64_t group_size, float* out) {
  // Both nibbles of each byte first (((v & 15) ^ 8) - 8 sign-extends 4 bits), then the scales:
  // two loops the compiler vectorises, where one with k / 2 indexing and a branch it does not.
  for (int64_t j = 0; j < K / 2; ++j) {
    out[2 * j] = static_cast<float>(((row[j] & 0xF) ^ 8) - 8);
    out[2 * j + 1] = static_cast<float>(((row[j] >> 4) ^ 8) - 8);
  }
  if (K % 2) out[K - 1] = static_cast<float>(((row[K / 2] & 0xF) ^ 8) - 8);
  for (int64_t g = 0, k = 0; k < K; ++g) {
    const float s = scale[g];
    for (const int64_t k1 = std::min(K, k + group_size); k < k1; ++k) out[k] *= s;
  }
}

}  // namespace

void check_int4_weight(const char* what, const Tensor& packed, const Tensor& scales, int64_t in_features,
                       int64_t group_size) {
  WEFT_CHECK(packed.defined() && scales.defined(), ValueError, what, ": undefined packed weight or scales");
  WEFT_CHECK(group_size > 0, ValueError, what, ": group size must be positive, got ", group_size);
  WEFT_CHECK(in_features > 0, ValueError, what, ": in_features must be positive, got ", in_features);
  WEFT_CHECK(packed.dtype() == DType::u8 && packed.dim() == 2 && packed.size(1) == ceil_div(in_features, 2),
             ShapeError, what, ": expected a packed u8 weight [N, ", ceil_div(in_features, 2), "] for ", in_features,
             " input features, got ", dtype_name(packed.dtype()), " ", shape_str(packed.shape()));
  const Shape expected{packed.size(0), ceil_div(in_features, group_size)};
  WEFT_CHECK(scales.dtype() == DType::f32 && scales.shape() == expected, ShapeError, what,
             ": expected f32 scales of shape ", shape_str(expected), " (one per ", group_size,
             " input features of each row), got ", dtype_name(scales.dtype()), " ", shape_str(scales.shape()));
}

namespace {

void check_x(const char* what, const Tensor& x, const Tensor& packed, const Tensor& bias) {
  WEFT_CHECK(x.defined(), ValueError, what, ": undefined input");
  WEFT_CHECK(x.dtype() == DType::f32 && x.dim() == 2, DTypeError, what, ": expected an f32 input [M, K], got ",
             dtype_name(x.dtype()), " ", shape_str(x.shape()));
  WEFT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{packed.size(0)}), ShapeError,
             what, ": expected an f32 bias [", packed.size(0), "], got ", dtype_name(bias.dtype()), " ",
             shape_str(bias.shape()));
}

}  // namespace

Tensor pack_int4(const Tensor& q) {
  WEFT_CHECK(q.defined() && q.dtype() == DType::i8 && q.dim() == 2, DTypeError,
             "pack_int4: expected an i8 tensor [N, K], got ", q.defined() ? dtype_name(q.dtype()) : "undefined", " ",
             q.defined() ? shape_str(q.shape()) : "");
  const int64_t N = q.size(0), K = q.size(1), bytes = ceil_div(K, 2);
  Tensor qc = q.contiguous_untracked();
  const int8_t* src = qc.data<int8_t>();
  Tensor packed = Tensor::zeros({N, bytes}, DType::u8);
  uint8_t* dst = packed.data<uint8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int8_t v = src[n * K + k];
      WEFT_CHECK(v >= -8 && v <= 7, ValueError, "pack_int4: value ", int(v), " at [", n, ", ", k,
                 "] does not fit in 4 bits ([-8, 7])");
      const uint8_t bits = static_cast<uint8_t>(v) & 0xF;
      dst[n * bytes + k / 2] |= (k & 1) ? static_cast<uint8_t>(bits << 4) : bits;
    }
  return packed;
}

Tensor unpack_int4(const Tensor& packed, int64_t in_features) {
  WEFT_CHECK(packed.defined() && packed.dtype() == DType::u8 && packed.dim() == 2 &&
                 packed.size(1) == ceil_div(in_features, 2),
             ShapeError, "unpack_int4: expected a packed u8 weight [N, ", ceil_div(in_features, 2), "] for ",
             in_features, " input features");
  const int64_t N = packed.size(0), K = in_features, bytes = packed.size(1);
  Tensor pc = packed.contiguous_untracked();
  const uint8_t* src = pc.data<uint8_t>();
  Tensor q = Tensor::empty({N, K}, DType::i8);
  int8_t* dst = q.data<int8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) dst[n * K + k] = static_cast<int8_t>(nibble(src[n * bytes + k / 2], k));
  return q;
}

Tensor dequantize_int4(const Tensor& packed, const Tensor& scales, int64_t in_features, int64_t group_size) {
  check_int4_weight("dequantize_int4", packed, scales, in_features, group_size);
  const int64_t N = packed.size(0), K = in_features, bytes = packed.size(1), groups = scales.size(1);
  Tensor pc = packed.contiguous_untracked(), sc = scales.contiguous_untracked();
  const uint8_t* src = pc.data<uint8_t>();
  const float* scale = sc.data<float>();
  Tensor w = Tensor::empty({N, K}, DType::f32);
  float* dst = w.data<float>();
  parallel_for(N, N * K >= kParallelGrain, [&](int64_t n_begin, int64_t n_end) {
    for (int64_t n = n_begin; n < n_end; ++n)
      decode_row(src + n * bytes, scale + n * groups, K, group_size, dst + n * K);
  });
  return w;
}

Tensor int4_linear(const Tensor& x, const Tensor& packed, const Tensor& scales, int64_t group_size, const Tensor& bias) {
  check_x("int4_linear", x, packed, bias);
  if (x.size(0) <= kFusedRows) {
    const int64_t K = x.size(1);
    check_int4_weight("int4_linear", packed, scales, K, group_size);
    Tensor pc = packed.contiguous_untracked(), sc = scales.contiguous_untracked();
    const uint8_t* src = pc.data<uint8_t>();
    const float* scale = sc.data<float>();
    const int64_t bytes = packed.size(1), groups = scales.size(1);
    return fused_weight_only_linear(x, packed.size(0), bias, [&](int64_t n, const float* xs, int64_t rows, float* out) {
      int4_row_dots(src + n * bytes, scale + n * groups, group_size, xs, K, rows, out);
    });
  }
  Tensor w = dequantize_int4(packed, scales, x.size(1), group_size);
  // w's transpose as a raw strided view: Tensor::t() belongs to ops (it records for autograd).
  return matmul(x, w.as_strided({w.size(1), w.size(0)}, {w.stride(1), w.stride(0)}, w.storage_offset()), bias);
}

namespace reference {

Tensor int4_linear(const Tensor& x, const Tensor& packed, const Tensor& scales, int64_t group_size, const Tensor& bias) {
  check_x("int4_linear", x, packed, bias);
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  check_int4_weight("int4_linear", packed, scales, K, group_size);
  std::vector<double> xs = x.to_vector<double>(), ss = scales.to_vector<double>();
  std::vector<uint8_t> bytes = packed.to_vector<uint8_t>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(N, 0.0);
  const int64_t row_bytes = packed.size(1), groups = scales.size(1);
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b[n];
      for (int64_t k = 0; k < K; ++k)
        acc += xs[m * K + k] * ss[n * groups + k / group_size] * nibble(bytes[n * row_bytes + k / 2], k);
      y[m * N + n] = acc;
    }
  return Tensor::from_vector(y, {M, N}, DType::f32);
}

}  // namespace reference

}  // namespace weft::cpu
