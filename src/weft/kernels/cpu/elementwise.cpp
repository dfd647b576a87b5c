#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/elementwise.h"

#include <cmath>
#include <numbers>

#include "weft/core/convert.h"
#include "weft/core/strided.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/fast_math.h"

namespace weft::cpu {

// The math, once: each op is a functor over the compute type C (float or double).
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCoef = 0.044715;

struct Neg { template <class C> C operator()(C x) const { return -x; } };
struct Exp { template <class C> C operator()(C x) const { return std::exp(x); } };
struct Log { template <class C> C operator()(C x) const { return std::log(x); } };
struct Sqrt { template <class C> C operator()(C x) const { return std::sqrt(x); } };
struct Abs { template <class C> C operator()(C x) const { return std::abs(x); } };
struct Square { template <class C> C operator()(C x) const { return x * x; } };
struct Relu { template <class C> C operator()(C x) const { return x > C(0) ? x : C(0); } };
struct Sigmoid { template <class C> C operator()(C x) const { return C(1) / (C(1) + std::exp(-x)); } };
struct Tanh { template <class C> C operator()(C x) const { return std::tanh(x); } };
// GELU's tanh is fast_tanh: vectorised in f32 (and so for bf16 and f16, which compute in f32),
// libm's in f64, so gradient checks see the exact function. Forced inline, as its backward:
// inside the loops OpenMP outlines for two threads GCC otherwise called it per element, and the
// forward ran 8x slower than the backward (3% of a GPT-2 124M step).
struct GeluTanh {
  template <class C> [[gnu::always_inline]] C operator()(C x) const {
    return C(0.5) * x * (C(1) + fast_tanh(C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x)));
  }
};
struct GeluErf {
  template <class C> C operator()(C x) const { return C(0.5) * x * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2))); }
};

struct Add { template <class C> C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> C operator()(C a, C b) const { return a * b; } };
struct Div { template <class C> C operator()(C a, C b) const { return a / b; } };
struct Pow { template <class C> C operator()(C a, C b) const { return std::pow(a, b); } };
struct Maximum { template <class C> C operator()(C a, C b) const { return a > b || std::isnan(a) ? a : b; } };
struct Minimum { template <class C> C operator()(C a, C b) const { return a < b || std::isnan(a) ? a : b; } };
struct ReluBackward { template <class C> C operator()(C g, C x) const { return x > C(0) ? g : C(0); } };
struct GeluTanhBackward {
  // Forced inline: otherwise GCC calls it per element from binary_loop's four loops and none of
  // them vectorises.
  template <class C> [[gnu::always_inline]] C operator()(C g, C x) const {
    C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
    C t = fast_tanh(inner);
    C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * d_inner);
  }
};
struct GeluErfBackward {
  template <class C> C operator()(C g, C x) const {
    C cdf = C(0.5) * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2)));
    C pdf = std::exp(C(-0.5) * x * x) * C(0.3989422804014327);  // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};
struct SigmoidBackward { template <class C> C operator()(C g, C y) const { return g * y * (C(1) - y); } };
struct TanhBackward { template <class C> C operator()(C g, C y) const { return g * (C(1) - y * y); } };
struct Eq { template <class C> C operator()(C a, C b) const { return a == b ? C(1) : C(0); } };
struct Gt { template <class C> C operator()(C a, C b) const { return a > b ? C(1) : C(0); } };
struct Lt { template <class C> C operator()(C a, C b) const { return a < b ? C(1) : C(0); } };

template <typename Fn>
decltype(auto) with_unary(Unary op, Fn&& fn) {
  switch (op) {
    case Unary::neg: return fn(Neg{});
    case Unary::exp: return fn(Exp{});
    case Unary::log: return fn(Log{});
    case Unary::sqrt: return fn(Sqrt{});
    case Unary::abs: return fn(Abs{});
    case Unary::relu: return fn(Relu{});
    case Unary::gelu_tanh: return fn(GeluTanh{});
    case Unary::gelu_erf: return fn(GeluErf{});
    case Unary::sigmoid: return fn(Sigmoid{});
    case Unary::tanh: return fn(Tanh{});
    case Unary::square: return fn(Square{});
  }
  return fn(Neg{});
}

template <typename Fn>
decltype(auto) with_binary(Binary op, Fn&& fn) {
  switch (op) {
    case Binary::add: return fn(Add{});
    case Binary::sub: return fn(Sub{});
    case Binary::mul: return fn(Mul{});
    case Binary::div: return fn(Div{});
    case Binary::pow: return fn(Pow{});
    case Binary::maximum: return fn(Maximum{});
    case Binary::minimum: return fn(Minimum{});
    case Binary::relu_backward: return fn(ReluBackward{});
    case Binary::gelu_tanh_backward: return fn(GeluTanhBackward{});
    case Binary::gelu_erf_backward: return fn(GeluErfBackward{});
    case Binary::sigmoid_backward: return fn(SigmoidBackward{});
    case Binary::tanh_backward: return fn(TanhBackward{});
    case Binary::eq: return fn(Eq{});
    case Binary::gt: return fn(Gt{});
    case Binary::lt: return fn(Lt{});
  }
  return fn(Add{});
}

void check_floating(const Tensor& t, const char* op) {
  WEFT_CHECK(t.defined(), ValueError, op, ": undefined tensor");
  WEFT_CHECK(is_floating(t.dtype()), DTypeError, op, ": expected a floating-point tensor, got ",
             dtype_name(t.dtype()));
}

template <typename T, typename Op>
void unary_loop(Tensor& out, const Tensor& x, Op op) {
  using C = compute_type<T>;
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  for_each_row<2>(out.shape(), {out.strides(), x.strides()}, [&](auto off, int64_t n, auto inner) {
    T* po = o + off[0];
    const T* px = in + off[1];
    if (inner[0] == 1 && inner[1] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(op(static_cast<C>(px[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) po[i * inner[0]] = convert<T>(op(static_cast<C>(px[i * inner[1]])));
    }
  });
}

template <typename T, typename Op>
void binary_loop(Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  using C = compute_type<T>;
  T* o = static_cast<T*>(out.data_ptr());
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  std::array<Shape, 3> strides{out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())};
  for_each_row<3>(out.shape(), strides, [&](auto off, int64_t n, auto inner) {
    T* po = o + off[0];
    const T* ra = pa + off[1];
    const T* rb = pb + off[2];
    if (inner[0] == 1 && inner[1] == 1 && inner[2] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(op(static_cast<C>(ra[i]), static_cast<C>(rb[i])));
    } else if (inner[0] == 1 && inner[1] == 1 && inner[2] == 0) {
      C vb = static_cast<C>(*rb);
      for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(op(static_cast<C>(ra[i]), vb));
    } else if (inner[0] == 1 && inner[1] == 0 && inner[2] == 1) {
      C va = static_cast<C>(*ra);
      for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(op(va, static_cast<C>(rb[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        po[i * inner[0]] = convert<T>(op(static_cast<C>(ra[i * inner[1]]), static_cast<C>(rb[i * inner[2]])));
    }
  });
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check_floating(a, op);
  check_floating(b, op);
  WEFT_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ: ", dtype_name(a.dtype()),
             " ", shape_str(a.shape()), " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
             " (convert one with .to())");
}
}  // namespace

const char* unary_name(Unary op) {
  static const char* names[] = {"neg", "exp", "log", "sqrt", "abs", "relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "square"};
  return names[static_cast<int>(op)];
}

const char* binary_name(Binary op) {
  static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "relu_backward",
                                "gelu_tanh_backward", "gelu_erf_backward", "sigmoid_backward",
                                "tanh_backward", "eq", "gt", "lt"};
  return names[static_cast<int>(op)];
}

Tensor unary(Unary op, const Tensor& x) {
  check_floating(x, unary_name(op));
  Tensor out = Tensor::empty_like(x, x.dtype());
  visit_floating(x.dtype(), "elementwise", [&](auto tag) {
    with_unary(op, [&](auto fn) { unary_loop<decltype(tag)>(out, x, fn); });
  });
  return out;
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, binary_name(op));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), binary_name(op));
  bool same_layout = a.shape() == shape && b.shape() == shape && a.strides() == b.strides();
  Tensor out = same_layout ? Tensor::empty_like(a, a.dtype()) : Tensor::empty(shape, a.dtype());
  visit_floating(a.dtype(), "elementwise", [&](auto tag) {
    with_binary(op, [&](auto fn) { binary_loop<decltype(tag)>(out, a, b, fn); });
  });
  return out;
}

Tensor binary(Binary op, const Tensor& a, double b) {
  check_floating(a, binary_name(op));
  return binary(op, a, Tensor::scalar(b, a.dtype()));
}

void binary_(Binary op, Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, binary_name(op));
  WEFT_CHECK(broadcast_shapes(a.shape(), b.shape(), binary_name(op)) == a.shape(), ShapeError,
             binary_name(op), "_: in-place result must keep shape ", shape_str(a.shape()),
             ", but broadcasting with ", shape_str(b.shape()), " changes it");
  visit_floating(a.dtype(), "elementwise", [&](auto tag) {
    with_binary(op, [&](auto fn) { binary_loop<decltype(tag)>(a, a, b, fn); });
  });
}

void axpy_(Tensor& a, double alpha, const Tensor& b) {
  check_same_dtype(a, b, "axpy_");
  WEFT_CHECK(a.shape() == b.shape(), ShapeError, "axpy_: shapes differ: ", shape_str(a.shape()),
             " vs ", shape_str(b.shape()));
  visit_floating(a.dtype(), "elementwise", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    C k = static_cast<C>(alpha);
    binary_loop<T>(a, a, b, [k](C x, C y) { return x + k * y; });
  });
}

// Computed in f32 (f64 for f64) and rounded once: a mask stored in a 16-bit format would round
// dropout's 1 / (1 - p) first.
Tensor masked_scale(const Tensor& x, const Tensor& keep, double scale) {
  Tensor xc = x.contiguous_untracked();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const uint8_t* k = keep.data<uint8_t>();
  const int64_t n = x.numel();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_half_like<T> || std::is_floating_point_v<T>) {
      using C = compute_type<T>;
      const T* in = xc.data<T>();
      T* o = out.data<T>();
      const C s = static_cast<C>(scale);
#pragma omp parallel for simd if (n >= kParallelGrain)
      for (int64_t i = 0; i < n; ++i) o[i] = convert<T>(k[i] ? static_cast<C>(in[i]) * s : C(0));
    } else {
      throw DTypeError(str("masked_scale: expected a floating-point tensor, got ", dtype_name(x.dtype())));
    }
  });
  return out;
}


namespace reference {

Tensor unary(Unary op, const Tensor& x) {
  std::vector<double> values = x.to_vector<double>();
  with_unary(op, [&](auto fn) {
    for (double& v : values) v = fn(v);
  });
  return Tensor::from_vector(values, x.shape(), x.dtype());
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), binary_name(op));
  Tensor out = Tensor::empty(shape, DType::f64);
  double* o = out.data<double>();
  std::vector<int64_t> index(shape.size(), 0);
  auto element = [&](const Tensor& t) {  // t's element at `index`, broadcast
    std::vector<int64_t> sub(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t od = d + static_cast<int64_t>(shape.size()) - t.dim();
      sub[d] = t.shape()[d] == 1 ? 0 : index[od];
    }
    return t.at(sub);
  };
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t r = i;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      index[d] = r % shape[d];
      r /= shape[d];
    }
    with_binary(op, [&](auto fn) { o[i] = fn(element(a), element(b)); });
  }
  return Tensor::empty(shape, a.dtype()).copy_(out);
}

}  // namespace reference

}  // namespace weft::cpu
