#include "weft/quant/weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/kernels/cpu/int4.h"

namespace weft::quant {

namespace {

// The weight's values in row-major order, checked finite.
std::vector<float> finite_values(const Tensor& weight, const char* what) {
  WEFT_CHECK(weight.defined() && weight.dtype() == DType::f32 && weight.dim() >= 2, DTypeError, what,
             ": expected an f32 weight of rank >= 2, got ", weight.defined() ? dtype_name(weight.dtype()) : "undefined",
             " ", weight.defined() ? shape_str(weight.shape()) : "");
  std::vector<float> values = weight.to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    WEFT_CHECK(std::isfinite(values[i]), ValueError, what, ": weight element ", i, " is ", values[i],
               "; only finite weights can be quantized");
  return values;
}

// Symmetric scale for a run of values whose largest magnitude maps to `levels`.
float symmetric_scale(const float* begin, const float* end, float levels) {
  float amax = 0;
  for (const float* p = begin; p != end; ++p) amax = std::max(amax, std::abs(*p));
  return amax > 0 ? amax / levels : 1.0f;
}

int8_t round_clamped(float w, float scale, float lo, float hi) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(w / scale), lo, hi));
}

}  // namespace

Int8Weight quantize_weight_int8(const Tensor& weight) {
  std::vector<float> w = finite_values(weight, "quantize_weight_int8");
  const int64_t out = weight.size(0), row = weight.numel() / std::max<int64_t>(out, 1);
  std::vector<float> scales(out);
  std::vector<int8_t> q(w.size());
  for (int64_t o = 0; o < out; ++o) {
    const float* r = w.data() + o * row;
    scales[o] = symmetric_scale(r, r + row, 127);
    for (int64_t i = 0; i < row; ++i) q[o * row + i] = round_clamped(r[i], scales[o], -127, 127);
  }
  return {Tensor::from_vector(q, weight.shape()), Tensor::from_vector(scales, {out})};
}

Tensor int8_weight_scales(const Tensor& weight) {
  std::vector<float> w = finite_values(weight, "int8_weight_scales");
  const int64_t out = weight.size(0), row = weight.numel() / std::max<int64_t>(out, 1);
  std::vector<float> scales(out);
  for (int64_t o = 0; o < out; ++o) scales[o] = symmetric_scale(w.data() + o * row, w.data() + (o + 1) * row, 127);
  return Tensor::from_vector(scales, {out});
}

Tensor dequantize_weight_int8(const Int8Weight& weight) {
  const int64_t out = weight.values.size(0), row = weight.values.numel() / std::max<int64_t>(out, 1);
  std::vector<float> q = weight.values.to_vector<float>(), scales = weight.scales.to_vector<float>();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < row; ++i) q[o * row + i] *= scales[o];
  return Tensor::from_vector(q, weight.values.shape());
}

Int4Weight quantize_weight_int4(const Tensor& weight, int64_t group_size) {
  WEFT_CHECK(group_size > 0, ValueError, "quantize_weight_int4: group size must be positive, got ", group_size);
  std::vector<float> w = finite_values(weight, "quantize_weight_int4");
  WEFT_CHECK(weight.dim() == 2, ShapeError, "quantize_weight_int4: expected a linear weight [out, in], got ",
             shape_str(weight.shape()));
  const int64_t out = weight.size(0), in = weight.size(1), groups = (in + group_size - 1) / group_size;
  std::vector<float> scales(out * groups);
  std::vector<int8_t> q(w.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * group_size, k1 = std::min(in, k0 + group_size);
      const float* r = w.data() + o * in;
      const float scale = scales[o * groups + g] = symmetric_scale(r + k0, r + k1, 7);
      for (int64_t k = k0; k < k1; ++k) q[o * in + k] = round_clamped(r[k], scale, -8, 7);
    }
  return {cpu::pack_int4(Tensor::from_vector(q, {out, in})), Tensor::from_vector(scales, {out, groups}), in, group_size};
}

}  // namespace weft::quant
