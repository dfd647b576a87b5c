#include "weft/quant/fake_quant.h"

#include <cmath>
#include <vector>

#include "weft/autograd/node.h"
#include "weft/kernels/cpu/elementwise.h"

namespace weft::quant {

namespace {

using Grads = std::vector<Tensor>;

// y and the STE mask for x's elements in rows of `row` elements, row r using scales[r].
template <typename T>
void fake_quantize_rows(const T* x, T* y, T* mask, int64_t n, int64_t row, const std::vector<double>& scales,
                        int32_t zero_point, int32_t qmin, int32_t qmax) {
  for (int64_t i = 0; i < n; ++i) {
    const T scale = static_cast<T>(scales[row ? i / row : 0]);
    const T q = std::nearbyint(x[i] / scale) + static_cast<T>(zero_point);
    const bool inside = q >= static_cast<T>(qmin) && q <= static_cast<T>(qmax);
    const T clamped = std::fmin(std::fmax(q, static_cast<T>(qmin)), static_cast<T>(qmax));
    y[i] = (clamped - static_cast<T>(zero_point)) * scale;
    mask[i] = inside ? T(1) : T(0);
  }
}

Tensor fake_quantize_impl(const char* name, const Tensor& x, const std::vector<double>& scales, int64_t row,
                          int32_t zero_point, int32_t qmin, int32_t qmax) {
  WEFT_CHECK(x.defined(), ValueError, name, ": undefined input");
  WEFT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, DTypeError, name, ": expected an f32 or f64 tensor, got ",
             dtype_name(x.dtype()), " ", shape_str(x.shape()));
  WEFT_CHECK(qmin < qmax, ValueError, name, ": expected qmin < qmax, got [", qmin, ", ", qmax, "]");
  WEFT_CHECK(zero_point >= qmin && zero_point <= qmax, ValueError, name, ": the zero point ", zero_point,
             " lies outside [", qmin, ", ", qmax, "]");
  for (double s : scales)
    WEFT_CHECK(std::isfinite(s) && s > 0, ValueError, name, ": scales must be finite and positive, got ", s);
  Tensor xc = x.detach().contiguous_untracked();
  Tensor y = Tensor::empty(x.shape(), x.dtype()), mask = Tensor::empty(x.shape(), x.dtype());
  if (x.dtype() == DType::f32)
    fake_quantize_rows(xc.data<float>(), y.data<float>(), mask.data<float>(), x.numel(), row, scales, zero_point, qmin, qmax);
  else
    fake_quantize_rows(xc.data<double>(), y.data<double>(), mask.data<double>(), x.numel(), row, scales, zero_point, qmin,
                       qmax);
  autograd::record(name, {x}, {y}, [mask](const Grads& g) { return Grads{cpu::mul(g[0], mask)}; });
  return y;
}

}  // namespace

Tensor fake_quantize(const Tensor& x, const cpu::QuantParams& p, int32_t qmin, int32_t qmax) {
  return fake_quantize_impl("fake_quantize", x, {p.scale}, 0, p.zero_point, qmin, qmax);
}

Tensor fake_quantize_per_channel(const Tensor& x, const Tensor& scales, int32_t qmin, int32_t qmax) {
  WEFT_CHECK(x.defined() && x.dim() >= 1, ShapeError, "fake_quantize_per_channel: expected a tensor of rank >= 1");
  WEFT_CHECK(scales.defined() && scales.shape() == Shape{x.size(0)}, ShapeError,
             "fake_quantize_per_channel: expected scales of shape [", x.size(0), "] for x ", shape_str(x.shape()),
             ", got ", scales.defined() ? shape_str(scales.shape()) : "undefined");
  const int64_t row = x.size(0) ? x.numel() / x.size(0) : 1;
  return fake_quantize_impl("fake_quantize_per_channel", x, scales.to_vector<double>(), row, 0, qmin, qmax);
}

}  // namespace weft::quant
