#include "weft/kernels/cuda/elementwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "weft/core/error.h"
#include "weft/core/strided.h"

namespace weft::cuda {

namespace {

using cpu::Binary;
using cpu::Unary;

void check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // cleared, so that it does not stick to the next call
  throw DeviceError(str(what, " on cuda:0 failed: ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
}

// Up to this many dimensions after merging those laid out back to back (core/strided.h), which
// every tensor weft builds stays within.
constexpr int kMaxDims = 8;

// N operands of one shape, broadcast ones with stride 0, passed to a kernel by value.
template <int N>
struct Layout {
  int ndim = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

template <int N>
Layout<N> layout_of(const Shape& shape, const std::array<Shape, N>& strides, const char* op) {
  const StridedLayout<N> merged = coalesce<N>(shape, strides);
  WEFT_CHECK(merged.shape.size() <= kMaxDims, ShapeError, op, " on cuda: at most ", kMaxDims,
             " dimensions that are not laid out back to back, got ", merged.shape.size(), " for shape ",
             shape_str(shape));
  Layout<N> l;
  l.ndim = static_cast<int>(merged.shape.size());
  l.numel = weft::numel(shape);
  for (int d = 0; d < l.ndim; ++d) {
    l.shape[d] = merged.shape[d];
    for (int k = 0; k < N; ++k) l.strides[k][d] = merged.strides[k][d];
  }
  return l;
}

// Each operand's element offset of flat (row-major) index i.
template <int N>
__device__ void offsets_of(int64_t i, const Layout<N>& l, int64_t (&offset)[N]) {
  for (int k = 0; k < N; ++k) offset[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t index = i % l.shape[d];
    i /= l.shape[d];
    for (int k = 0; k < N; ++k) offset[k] += index * l.strides[k][d];
  }
}

constexpr int kThreads = 256;
// A grid-stride loop covers the rest; more blocks than this only queue.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

int blocks_for(int64_t numel) {
  return static_cast<int>(std::min((numel + kThreads - 1) / kThreads, kMaxBlocks));
}

#define WEFT_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

template <typename T>
constexpr bool is_half_like = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
using compute_type = std::conditional_t<is_half_like<T>, float, T>;

template <typename T>
__device__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

// core/convert.h's convert, on the device: 16-bit floats through f32, bool as "not zero", a float
// to an integer truncated, saturating, NaN giving 0.
template <typename To, typename From>
__device__ To convert(From from) {
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (is_half_like<To>) {
    return from_float<To>(static_cast<float>(from));
  } else if constexpr (is_half_like<From>) {
    return convert<To>(static_cast<float>(from));
  } else if constexpr (std::is_same_v<To, bool>) {
    return from != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (from != from) return To(0);
    if (from <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (from >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(from);
  } else {
    return static_cast<To>(from);
  }
}

// The device's type of each dtype, as the tag fn is called with.
template <typename Fn>
void visit(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    case DType::i64: return fn(int64_t{});
    case DType::i32: return fn(int32_t{});
    case DType::i8: return fn(int8_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::boolean: return fn(bool{});
  }
}

template <typename Fn>
void visit_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    default: throw DTypeError(str(op, ": expected a floating-point tensor, got ", dtype_name(dtype)));
  }
}

template <typename D, typename S>
__global__ void copy_kernel(D* dst, const S* src, Layout<2> l) {
  WEFT_GRID_STRIDE(i, l.numel) {
    int64_t offset[2];
    offsets_of(i, l, offset);
    dst[offset[0]] = convert<D>(src[offset[1]]);
  }
}

void check_on_device(const Tensor& t, const char* op) {
  WEFT_CHECK(t.defined(), ValueError, op, ": undefined tensor");
  WEFT_CHECK(t.device() == Device::cuda(), DeviceError, op, ": expected a tensor on cuda:0, got one on ",
             t.device().name(), " (move it with .to(Device::cuda()))");
}

// dst = src on the device, src broadcast to dst's shape.
void copy_on_device(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const Layout<2> l = layout_of<2>(dst.shape(), {dst.strides(), broadcast_strides(src, dst.shape())}, "copy");
  visit(dst.dtype(), [&](auto d) {
    visit(src.dtype(), [&](auto s) {
      using D = decltype(d);
      using S = decltype(s);
      copy_kernel<<<blocks_for(l.numel), kThreads>>>(static_cast<D*>(dst.data_ptr()),
                                                     static_cast<const S*>(src.data_ptr()), l);
    });
  });
  check(cudaGetLastError(), "copy");
}

// `t` as a dense tensor of `shape` on its own side, without a copy when it is one already.
Tensor dense(const Tensor& t, const Shape& shape) {
  if (t.is_contiguous() && t.shape() == shape) return t;
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  if (t.device().is_cpu()) out.copy_(t);
  else copy_on_device(out, t);
  return out;
}

void transfer(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind) {
  check(cudaMemcpy(dst, src, nbytes, kind), kind == cudaMemcpyHostToDevice ? "a copy to the device" : "a copy to the host");
}

// ---- the math of kernels/cpu/elementwise.cpp, on the compute type C (float or double) ----

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoef = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

struct Neg { template <class C> __device__ C operator()(C x) const { return -x; } };
struct Exp { template <class C> __device__ C operator()(C x) const { return exp(x); } };
struct Log { template <class C> __device__ C operator()(C x) const { return log(x); } };
struct Sqrt { template <class C> __device__ C operator()(C x) const { return sqrt(x); } };
struct Abs { template <class C> __device__ C operator()(C x) const { return fabs(x); } };
struct Square { template <class C> __device__ C operator()(C x) const { return x * x; } };
struct Relu { template <class C> __device__ C operator()(C x) const { return x > C(0) ? x : C(0); } };
struct Sigmoid { template <class C> __device__ C operator()(C x) const { return C(1) / (C(1) + exp(-x)); } };
struct Tanh { template <class C> __device__ C operator()(C x) const { return tanh(x); } };
struct GeluTanh {
  template <class C> __device__ C operator()(C x) const {
    return C(0.5) * x * (C(1) + tanh(C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x)));
  }
};
struct GeluErf {
  template <class C> __device__ C operator()(C x) const { return C(0.5) * x * (C(1) + erf(x * C(kInvSqrt2))); }
};

struct Add { template <class C> __device__ C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> __device__ C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> __device__ C operator()(C a, C b) const { return a * b; } };
struct Div { template <class C> __device__ C operator()(C a, C b) const { return a / b; } };
struct Pow { template <class C> __device__ C operator()(C a, C b) const { return pow(a, b); } };
struct Maximum { template <class C> __device__ C operator()(C a, C b) const { return a > b || isnan(a) ? a : b; } };
struct Minimum { template <class C> __device__ C operator()(C a, C b) const { return a < b || isnan(a) ? a : b; } };
struct ReluBackward { template <class C> __device__ C operator()(C g, C x) const { return x > C(0) ? g : C(0); } };
struct GeluTanhBackward {
  template <class C> __device__ C operator()(C g, C x) const {
    const C t = tanh(C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x));
    const C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * d_inner);
  }
};
struct GeluErfBackward {
  template <class C> __device__ C operator()(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + erf(x * C(kInvSqrt2)));
    const C pdf = exp(C(-0.5) * x * x) * C(kInvSqrt2Pi);
    return g * (cdf + x * pdf);
  }
};
struct SigmoidBackward { template <class C> __device__ C operator()(C g, C y) const { return g * y * (C(1) - y); } };
struct TanhBackward { template <class C> __device__ C operator()(C g, C y) const { return g * (C(1) - y * y); } };
struct Eq { template <class C> __device__ C operator()(C a, C b) const { return a == b ? C(1) : C(0); } };
struct Gt { template <class C> __device__ C operator()(C a, C b) const { return a > b ? C(1) : C(0); } };
struct Lt { template <class C> __device__ C operator()(C a, C b) const { return a < b ? C(1) : C(0); } };

template <typename Fn>
void with_unary(Unary op, Fn&& fn) {
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
}

template <typename Fn>
void with_binary(Binary op, Fn&& fn) {
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
}

template <typename T, typename Op>
__global__ void unary_kernel(T* out, const T* x, Layout<2> l, Op op) {
  using C = compute_type<T>;
  WEFT_GRID_STRIDE(i, l.numel) {
    int64_t offset[2];
    offsets_of(i, l, offset);
    out[offset[0]] = convert<T>(op(static_cast<C>(x[offset[1]])));
  }
}

// b null: every element's b is `scalar`.
template <typename T, typename Op>
__global__ void binary_kernel(T* out, const T* a, const T* b, compute_type<T> scalar, Layout<3> l, Op op) {
  using C = compute_type<T>;
  WEFT_GRID_STRIDE(i, l.numel) {
    int64_t offset[3];
    offsets_of(i, l, offset);
    const C vb = b ? static_cast<C>(b[offset[2]]) : scalar;
    out[offset[0]] = convert<T>(op(static_cast<C>(a[offset[1]]), vb));
  }
}

void check_binary_inputs(Binary op, const Tensor& a, const Tensor& b) {
  check_on_device(a, cpu::binary_name(op));
  check_on_device(b, cpu::binary_name(op));
  WEFT_CHECK(a.dtype() == b.dtype(), DTypeError, cpu::binary_name(op), ": dtypes differ: ", dtype_name(a.dtype()),
             " ", shape_str(a.shape()), " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
             " (convert one with .to())");
}

// out = a op b (b null: the scalar), the three already of one shape through their strides.
void launch_binary(Binary op, const Tensor& out, const Tensor& a, const Tensor* b, double scalar,
                   const Shape& b_strides) {
  if (out.numel() == 0) return;
  const Layout<3> l =
      layout_of<3>(out.shape(), {out.strides(), broadcast_strides(a, out.shape()), b_strides}, cpu::binary_name(op));
  visit_floating(a.dtype(), cpu::binary_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_type<T>;
    // As the CPU: the scalar is first a value of a's dtype.
    const C b_value = static_cast<C>(convert<T>(scalar));
    with_binary(op, [&](auto fn) {
      binary_kernel<<<blocks_for(l.numel), kThreads>>>(static_cast<T*>(out.data_ptr()),
                                                       static_cast<const T*>(a.data_ptr()),
                                                       b ? static_cast<const T*>(b->data_ptr()) : nullptr, b_value,
                                                       l, fn);
    });
  });
  check(cudaGetLastError(), cpu::binary_name(op));
}

}  // namespace

void copy(Tensor& dst, const Tensor& src) {
  WEFT_CHECK(dst.defined() && src.defined(), ValueError, "copy: undefined tensor");
  WEFT_CHECK(broadcast_shapes(dst.shape(), src.shape(), "copy") == dst.shape(), ShapeError, "copy: cannot copy ",
             shape_str(src.shape()), " into ", shape_str(dst.shape()));
  const bool to_device = !dst.device().is_cpu(), from_device = !src.device().is_cpu();
  if (to_device) check_on_device(dst, "copy");
  if (from_device) check_on_device(src, "copy");
  if (dst.numel() == 0) return;
  if (to_device && from_device) return copy_on_device(dst, src);
  WEFT_CHECK(to_device || from_device, DeviceError, "copy: neither tensor is on cuda");
  // One transfer of src's bytes, made dense on its own side; the conversion to dst's dtype and
  // layout, when one is needed, on dst's side.
  const Tensor from = dense(src, dst.shape());
  const bool direct = dst.dtype() == src.dtype() && dst.is_contiguous();
  Tensor landed = direct ? dst : Tensor::empty(dst.shape(), src.dtype(), dst.device());
  transfer(landed.data_ptr(), from.data_ptr(), from.nbytes(), to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  if (direct) return;
  if (to_device) copy_on_device(dst, landed);
  else dst.copy_(landed);
}

Tensor unary(Unary op, const Tensor& x) {
  check_on_device(x, cpu::unary_name(op));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return out;
  const Layout<2> l = layout_of<2>(x.shape(), {out.strides(), x.strides()}, cpu::unary_name(op));
  visit_floating(x.dtype(), cpu::unary_name(op), [&](auto tag) {
    using T = decltype(tag);
    with_unary(op, [&](auto fn) {
      unary_kernel<<<blocks_for(l.numel), kThreads>>>(static_cast<T*>(out.data_ptr()),
                                                      static_cast<const T*>(x.data_ptr()), l, fn);
    });
  });
  check(cudaGetLastError(), cpu::unary_name(op));
  return out;
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  check_binary_inputs(op, a, b);
  Tensor out = Tensor::empty(broadcast_shapes(a.shape(), b.shape(), cpu::binary_name(op)), a.dtype(), a.device());
  launch_binary(op, out, a, &b, 0, broadcast_strides(b, out.shape()));
  return out;
}

Tensor binary(Binary op, const Tensor& a, double b) {
  check_on_device(a, cpu::binary_name(op));
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  launch_binary(op, out, a, nullptr, b, Shape(a.dim(), 0));
  return out;
}

void binary_(Binary op, Tensor& a, const Tensor& b) {
  check_binary_inputs(op, a, b);
  WEFT_CHECK(broadcast_shapes(a.shape(), b.shape(), cpu::binary_name(op)) == a.shape(), ShapeError,
             cpu::binary_name(op), "_: cannot broadcast ", shape_str(b.shape()), " into ", shape_str(a.shape()));
  launch_binary(op, a, a, &b, 0, broadcast_strides(b, a.shape()));
}

}  // namespace weft::cuda
