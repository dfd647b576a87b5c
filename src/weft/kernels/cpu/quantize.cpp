#include "weft/kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/core/threads.h"

namespace weft::cpu {

namespace {

void check_f32(const Tensor& x, const char* what) {
  WEFT_CHECK(x.defined(), ValueError, what, ": undefined tensor");
  WEFT_CHECK(x.dtype() == DType::f32, DTypeError, what, ": expected an f32 tensor, got ", dtype_name(x.dtype()), " ",
             shape_str(x.shape()));
}

void check_quantized(const Tensor& q, const char* what) {
  WEFT_CHECK(q.defined(), ValueError, what, ": undefined tensor");
  WEFT_CHECK(q.dtype() == DType::u8 || q.dtype() == DType::i8, DTypeError, what, ": expected a u8 or i8 tensor, got ",
             dtype_name(q.dtype()), " ", shape_str(q.shape()));
}

// The fast loop clamps x / scale to the integers' range first, then rounds by adding and
// subtracting 1.5 * 2^23 (exact round-half-even for |v| < 2^22, which the clamp guarantees): the
// loop vectorises, where std::nearbyint would be a library call per element. Clamping before
// rounding gives the reference's result because the bounds are integers; the comparisons send
// NaN to the lower bound, as the reference's fmax does.
template <typename Q>
void quantize_loop(const float* x, Q* q, int64_t n, const QuantParams& p, DType dtype) {
  const float scale = p.scale, zp = static_cast<float>(p.zero_point);
  const float lo = static_cast<float>(quant_min(dtype)) - zp, hi = static_cast<float>(quant_max(dtype)) - zp;
  const float magic = 12582912.0f;  // 1.5 * 2^23
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    q[i] = static_cast<Q>((v + magic) - magic + zp);
  }
}

template <typename Q>
void dequantize_loop(const Q* q, float* x, int64_t n, const QuantParams& p) {
  const float scale = p.scale;
  const int32_t zp = p.zero_point;
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int32_t>(q[i]) - zp) * scale;
}

}  // namespace

int32_t quant_min(DType dtype) {
  if (dtype == DType::u8) return 0;
  if (dtype == DType::i8) return -128;
  throw DTypeError(str("quantization: expected u8 or i8 as the quantized dtype, got ", dtype_name(dtype)));
}

int32_t quant_max(DType dtype) {
  if (dtype == DType::u8) return 255;
  if (dtype == DType::i8) return 127;
  throw DTypeError(str("quantization: expected u8 or i8 as the quantized dtype, got ", dtype_name(dtype)));
}

void check_quant_params(const QuantParams& p, DType dtype, const char* what) {
  WEFT_CHECK(std::isfinite(p.scale) && p.scale > 0, ValueError, what, ": the scale must be finite and positive, got ",
             p.scale);
  WEFT_CHECK(p.zero_point >= quant_min(dtype) && p.zero_point <= quant_max(dtype), ValueError, what,
             ": the zero point ", p.zero_point, " lies outside ", dtype_name(dtype), "'s range [", quant_min(dtype),
             ", ", quant_max(dtype), "]");
}

QuantParams choose_quant_params(float min, float max, DType dtype) {
  WEFT_CHECK(std::isfinite(min) && std::isfinite(max) && min <= max, ValueError,
             "choose_quant_params: expected a finite range with min <= max, got [", min, ", ", max, "]");
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  const int32_t qmin = quant_min(dtype), qmax = quant_max(dtype);
  if (max == min) return {1.0f, 0};  // both 0
  QuantParams p;
  p.scale = (max - min) / static_cast<float>(qmax - qmin);
  p.scale = std::max(p.scale, std::numeric_limits<float>::min());
  const float zero_point = static_cast<float>(qmin) - std::nearbyint(min / p.scale);
  p.zero_point = static_cast<int32_t>(std::clamp(zero_point, static_cast<float>(qmin), static_cast<float>(qmax)));
  return p;
}

Tensor quantize(const Tensor& x, const QuantParams& p, DType dtype) {
  check_f32(x, "quantize");
  check_quant_params(p, dtype, "quantize");
  Tensor xc = x.contiguous_untracked();
  Tensor q = Tensor::empty(x.shape(), dtype);
  if (dtype == DType::u8) quantize_loop(xc.data<float>(), q.data<uint8_t>(), q.numel(), p, dtype);
  else quantize_loop(xc.data<float>(), q.data<int8_t>(), q.numel(), p, dtype);
  return q;
}

Tensor dequantize(const Tensor& q, const QuantParams& p) {
  check_quantized(q, "dequantize");
  check_quant_params(p, q.dtype(), "dequantize");
  Tensor qc = q.contiguous_untracked();
  Tensor x = Tensor::empty(q.shape(), DType::f32);
  if (q.dtype() == DType::u8) dequantize_loop(qc.data<uint8_t>(), x.data<float>(), x.numel(), p);
  else dequantize_loop(qc.data<int8_t>(), x.data<float>(), x.numel(), p);
  return x;
}

MinMax aminmax(const Tensor& x) {
  check_f32(x, "aminmax");
  Tensor xc = x.contiguous_untracked();
  const float* p = xc.data<float>();
  const int64_t n = xc.numel();
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
#pragma omp parallel for simd reduction(min : lo) reduction(max : hi) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    lo = p[i] < lo ? p[i] : lo;
    hi = p[i] > hi ? p[i] : hi;
  }
  if (lo > hi) return {};  // empty, or only NaN
  return {lo, hi};
}

namespace reference {

Tensor quantize(const Tensor& x, const QuantParams& p, DType dtype) {
  check_f32(x, "quantize");
  check_quant_params(p, dtype, "quantize");
  std::vector<float> values = x.to_vector<float>();
  const float lo = static_cast<float>(quant_min(dtype)), hi = static_cast<float>(quant_max(dtype));
  std::vector<double> q(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    q[i] = std::fmin(std::fmax(std::nearbyint(values[i] / p.scale) + static_cast<float>(p.zero_point), lo), hi);
  return Tensor::from_vector(q, x.shape(), dtype);
}

Tensor dequantize(const Tensor& q, const QuantParams& p) {
  check_quantized(q, "dequantize");
  check_quant_params(p, q.dtype(), "dequantize");
  std::vector<int32_t> values = q.to_vector<int32_t>();
  std::vector<float> x(values.size());
  for (size_t i = 0; i < values.size(); ++i) x[i] = static_cast<float>(values[i] - p.zero_point) * p.scale;
  return Tensor::from_vector(x, q.shape());
}

MinMax aminmax(const Tensor& x) {
  check_f32(x, "aminmax");
  std::vector<float> values = x.to_vector<float>();
  bool any = false;
  MinMax r;
  for (float v : values) {
    if (std::isnan(v)) continue;
    r.min = any ? std::min(r.min, v) : v;
    r.max = any ? std::max(r.max, v) : v;
    any = true;
  }
  return r;
}

}  // namespace reference

}  // namespace weft::cpu
