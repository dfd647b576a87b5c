#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

struct Geometry {
  int64_t N, C, H, W, OH, OW;
  Pool2dParams p;
};

Shape pair(const std::array<int64_t, 2>& a) { return {a[0], a[1]}; }

Geometry geometry(const char* op, const Shape& x, const Pool2dParams& p) {
  WEFT_CHECK(x.size() == 4, ShapeError, op, ": expected input of rank 4 [N, C, H, W], got shape ", shape_str(x));
  for (int i = 0; i < 2; ++i) {
    WEFT_CHECK(p.kernel[i] >= 1, ValueError, op, ": kernel must be positive, got ", shape_str(pair(p.kernel)));
    WEFT_CHECK(p.stride[i] >= 1, ValueError, op, ": stride must be positive, got ", shape_str(pair(p.stride)));
    WEFT_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], ValueError, op, ": padding ",
               shape_str(pair(p.padding)), " must be between 0 and half the kernel ", shape_str(pair(p.kernel)));
  }
  Geometry g{x[0], x[1], x[2], x[3], 0, 0, p};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    int64_t padded = x[2 + i] + 2 * p.padding[i];
    WEFT_CHECK(p.kernel[i] <= padded, ShapeError, op, ": kernel ", shape_str(pair(p.kernel)),
               " is larger than the padded input: input ", shape_str(x), ", padding ", shape_str(pair(p.padding)));
    out[i] = (padded - p.kernel[i]) / p.stride[i] + 1;
  }
  g.OH = out[0];
  g.OW = out[1];
  return g;
}

void check_floating(const char* op, const Tensor& x) {
  WEFT_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating dtype, got ", dtype_name(x.dtype()));
}

void check_grad_out(const char* op, const Tensor& grad_out, const Shape& expected) {
  WEFT_CHECK(grad_out.shape() == expected, ShapeError, op, ": grad_out ", shape_str(grad_out.shape()),
             " does not match the pooling's output shape ", shape_str(expected));
}

// Calls cell(oi, plane, i) for every output element oi (in order) and, within its window, every
// input element in bounds (row-major): i = ih * W + iw within plane `plane` = n * C + c.
template <typename Cell>
void for_each_cell(const Geometry& g, Cell&& cell) {
  int64_t oi = 0;
  for (int64_t plane = 0; plane < g.N * g.C; ++plane)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow, ++oi)
        for (int64_t kh = 0; kh < g.p.kernel[0]; ++kh) {
          const int64_t ih = oh * g.p.stride[0] - g.p.padding[0] + kh;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t kw = 0; kw < g.p.kernel[1]; ++kw) {
            const int64_t iw = ow * g.p.stride[1] - g.p.padding[1] + kw;
            if (iw >= 0 && iw < g.W) cell(oi, plane, ih * g.W + iw);
          }
        }
}

// --- oneDNN ---
// Pooling runs on its input's layout: a channels-last input (layout.h) gives a channels-last
// output and gradient, anything else is read as plain NCHW. oneDNN's jit pooling handles both;
// channels-last is the faster one, its vectors running along the channels.

Tensor to_f32(const Tensor& t) { return Tensor::empty_like(t, DType::f32).copy_(t); }
Tensor to_dtype(const Tensor& t, DType dtype) { return Tensor::empty_like(t, dtype).copy_(t); }

struct PoolDescs {
  memory::desc src, dst;
  memory::dims strides, kernel, padding;
};

PoolDescs pool_descs(const Geometry& g, DType dtype, bool channels_last) {
  memory::data_type dt = onednn::data_type(dtype);
  const auto tag = channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
  auto desc = [&](const memory::dims& dims) { return memory::desc(dims, dt, tag); };
  return {desc({g.N, g.C, g.H, g.W}), desc({g.N, g.C, g.OH, g.OW}),
          {g.p.stride[0], g.p.stride[1]}, {g.p.kernel[0], g.p.kernel[1]}, {g.p.padding[0], g.p.padding[1]}};
}

Tensor empty_in_layout(const Shape& shape, DType dtype, bool channels_last) {
  return channels_last ? empty_channels_last(shape, dtype) : Tensor::empty(shape, dtype);
}

// t in the layout a pass runs on: itself, or a copy.
Tensor in_layout(const Tensor& t, bool channels_last) {
  if (!channels_last) return t.contiguous_untracked();
  if (is_channels_last(t)) return t;
  return empty_channels_last(t.shape(), t.dtype()).copy_(t);
}

dnnl::pooling_forward::primitive_desc forward_pd(algorithm alg, prop_kind kind, const PoolDescs& d) {
  dnnl::pooling_forward::desc desc(kind, alg, d.src, d.dst, d.strides, d.kernel, d.padding, d.padding);
  return {desc, onednn::engine()};
}

MaxPool2dResult onednn_forward(algorithm alg, const Geometry& g, const Tensor& x, bool with_workspace) {
  const bool channels_last = is_channels_last(x);
  Tensor xc = in_layout(x, channels_last);
  MaxPool2dResult r{empty_in_layout({g.N, g.C, g.OH, g.OW}, x.dtype(), channels_last), Tensor()};
  PoolDescs d = pool_descs(g, x.dtype(), channels_last);
  auto pd = forward_pd(alg, with_workspace ? prop_kind::forward_training : prop_kind::forward_inference, d);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(d.src, xc)},
                                       {DNNL_ARG_DST, onednn::memory(d.dst, r.out)}};
  if (with_workspace) {
    r.workspace = Tensor::empty({static_cast<int64_t>(pd.workspace_desc().get_size())}, DType::u8);
    args[DNNL_ARG_WORKSPACE] = onednn::memory(pd.workspace_desc(), r.workspace);
  }
  dnnl::pooling_forward(pd).execute(onednn::stream(), args);
  onednn::stream().wait();
  return r;
}

Tensor onednn_backward(algorithm alg, const Geometry& g, const Tensor& grad_out, const Tensor& workspace,
                       bool channels_last) {
  Tensor go = in_layout(grad_out, channels_last);
  Tensor grad_x = empty_in_layout({g.N, g.C, g.H, g.W}, go.dtype(), channels_last);
  PoolDescs d = pool_descs(g, go.dtype(), channels_last);
  auto hint = forward_pd(alg, prop_kind::forward_training, d);
  dnnl::pooling_backward::desc desc(alg, d.src, d.dst, d.strides, d.kernel, d.padding, d.padding);
  dnnl::pooling_backward::primitive_desc pd(desc, onednn::engine(), hint);
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, onednn::memory(d.dst, go)},
                                       {DNNL_ARG_DIFF_SRC, onednn::memory(d.src, grad_x)}};
  if (workspace.defined()) {
    WEFT_CHECK(workspace.nbytes() == pd.workspace_desc().get_size(), ValueError, "max_pool2d_backward: workspace of ",
               workspace.nbytes(), " bytes does not belong to this pooling (expected ",
               pd.workspace_desc().get_size(), ")");
    args[DNNL_ARG_WORKSPACE] = onednn::memory(pd.workspace_desc(), workspace);
  }
  dnnl::pooling_backward(pd).execute(onednn::stream(), args);
  onednn::stream().wait();
  return grad_x;
}

int64_t bin_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

Shape pool2d_output_shape(const char* op, const Shape& x, const Pool2dParams& p) {
  Geometry g = geometry(op, x, p);
  return {g.N, g.C, g.OH, g.OW};
}

MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dParams& p, bool with_workspace) {
  Geometry g = geometry("max_pool2d", x.shape(), p);
  check_floating("max_pool2d", x);
  if (x.dtype() == DType::f64 || x.numel() == 0) return reference::max_pool2d(x, p);
  if (!onednn::computes_in(x.dtype())) {
    MaxPool2dResult r = onednn_forward(algorithm::pooling_max, g, to_f32(x), with_workspace);
    return {to_dtype(r.out, x.dtype()), r.workspace};
  }
  return onednn_forward(algorithm::pooling_max, g, x, with_workspace);
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dParams& p, bool channels_last) {
  Geometry g = geometry("max_pool2d_backward", x_shape, p);
  check_grad_out("max_pool2d_backward", grad_out, {g.N, g.C, g.OH, g.OW});
  check_floating("max_pool2d_backward", grad_out);
  WEFT_CHECK(workspace.defined(), ValueError,
             "max_pool2d_backward: no workspace; run the forward max_pool2d with with_workspace=true");
  if (workspace.dtype() == DType::i64) return reference::max_pool2d_backward(grad_out, workspace, x_shape, p);
  if (!onednn::computes_in(grad_out.dtype()))
    return to_dtype(onednn_backward(algorithm::pooling_max, g, to_f32(grad_out), workspace, channels_last),
                    grad_out.dtype());
  return onednn_backward(algorithm::pooling_max, g, grad_out, workspace, channels_last);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  Geometry g = geometry("avg_pool2d", x.shape(), p);
  check_floating("avg_pool2d", x);
  if (x.dtype() == DType::f64 || x.numel() == 0) return reference::avg_pool2d(x, p);
  if (!onednn::computes_in(x.dtype()))
    return to_dtype(onednn_forward(algorithm::pooling_avg_include_padding, g, to_f32(x), false).out, x.dtype());
  return onednn_forward(algorithm::pooling_avg_include_padding, g, x, false).out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p,
                           bool channels_last) {
  Geometry g = geometry("avg_pool2d_backward", x_shape, p);
  check_grad_out("avg_pool2d_backward", grad_out, {g.N, g.C, g.OH, g.OW});
  check_floating("avg_pool2d_backward", grad_out);
  if (grad_out.dtype() == DType::f64 || grad_out.numel() == 0)
    return reference::avg_pool2d_backward(grad_out, x_shape, p);
  if (!onednn::computes_in(grad_out.dtype()))
    return to_dtype(
        onednn_backward(algorithm::pooling_avg_include_padding, g, to_f32(grad_out), Tensor(), channels_last),
        grad_out.dtype());
  return onednn_backward(algorithm::pooling_avg_include_padding, g, grad_out, Tensor(), channels_last);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  WEFT_CHECK(x.dim() == 4, ShapeError, "adaptive_avg_pool2d: expected input of rank 4 [N, C, H, W], got shape ",
             shape_str(x.shape()));
  WEFT_CHECK(output_size[0] >= 1 && output_size[1] >= 1, ValueError,
             "adaptive_avg_pool2d: output size must be positive, got ", shape_str(pair(output_size)));
  WEFT_CHECK(x.size(2) >= 1 && x.size(3) >= 1, ShapeError,
             "adaptive_avg_pool2d: input ", shape_str(x.shape()), " has an empty spatial dim");
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = output_size[0], OW = output_size[1];
  Tensor out = Tensor::empty({x.size(0), x.size(1), OH, OW}, x.dtype());
  visit_floating(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    Tensor xc = x.contiguous_untracked();
    const T* in = xc.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for if (planes * H * W >= kParallelGrain)
    for (int64_t plane = 0; plane < planes; ++plane)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h0 = bin_start(oh, H, OH), h1 = bin_end(oh, H, OH);
          const int64_t w0 = bin_start(ow, W, OW), w1 = bin_end(ow, W, OW);
          A sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += static_cast<A>(in[(plane * H + h) * W + w]);
          o[(plane * OH + oh) * OW + ow] = convert<T>(sum / static_cast<A>((h1 - h0) * (w1 - w0)));
        }
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape) {
  WEFT_CHECK(x_shape.size() == 4 && grad_out.dim() == 4 && grad_out.size(0) == x_shape[0] &&
                 grad_out.size(1) == x_shape[1],
             ShapeError, "adaptive_avg_pool2d_backward: grad_out ", shape_str(grad_out.shape()),
             " does not match input ", shape_str(x_shape));
  const int64_t planes = x_shape[0] * x_shape[1], H = x_shape[2], W = x_shape[3];
  const int64_t OH = grad_out.size(2), OW = grad_out.size(3);
  Tensor grad_x = Tensor::empty(x_shape, grad_out.dtype());
  visit_floating(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    Tensor go = grad_out.contiguous_untracked();
    const T* g = go.data<T>();
    T* gx = grad_x.data<T>();
    // Bins overlap when the output size does not divide the input: accumulate one plane at a
    // time in A, so each thread owns whole planes and 16-bit grads are rounded once.
#pragma omp parallel if (planes * H * W >= kParallelGrain)
    {
      std::vector<A> acc(H * W);
#pragma omp for
      for (int64_t plane = 0; plane < planes; ++plane) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t h0 = bin_start(oh, H, OH), h1 = bin_end(oh, H, OH);
            const int64_t w0 = bin_start(ow, W, OW), w1 = bin_end(ow, W, OW);
            const A share = static_cast<A>(g[(plane * OH + oh) * OW + ow]) / static_cast<A>((h1 - h0) * (w1 - w0));
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) acc[h * W + w] += share;
          }
        for (int64_t i = 0; i < H * W; ++i) gx[plane * H * W + i] = convert<T>(acc[i]);
      }
    }
  });
  return grad_x;
}

namespace reference {

MaxPool2dResult max_pool2d(const Tensor& x, const Pool2dParams& p) {
  Geometry g = geometry("max_pool2d", x.shape(), p);
  std::vector<double> xs = x.to_vector<double>();
  const int64_t count = g.N * g.C * g.OH * g.OW;
  std::vector<double> out(count, -std::numeric_limits<double>::infinity());
  std::vector<int64_t> argmax(count, -1);
  for_each_cell(g, [&](int64_t oi, int64_t plane, int64_t i) {
    double v = xs[plane * g.H * g.W + i];
    if (argmax[oi] < 0 || v > out[oi] || (std::isnan(v) && !std::isnan(out[oi]))) {
      out[oi] = v;
      argmax[oi] = i;
    }
  });
  Shape shape{g.N, g.C, g.OH, g.OW};
  return {Tensor::from_vector(out, shape, x.dtype()), Tensor::from_vector(argmax, shape)};
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& x_shape,
                           const Pool2dParams& p) {
  Geometry g = geometry("max_pool2d_backward", x_shape, p);
  check_grad_out("max_pool2d_backward", grad_out, {g.N, g.C, g.OH, g.OW});
  WEFT_CHECK(argmax.dtype() == DType::i64 && argmax.shape() == grad_out.shape(), ValueError,
             "max_pool2d_backward: expected an i64 argmax of shape ", shape_str(grad_out.shape()), ", got ",
             dtype_name(argmax.dtype()), " ", shape_str(argmax.shape()));
  std::vector<double> go = grad_out.to_vector<double>(), grad_x(numel(x_shape), 0.0);
  std::vector<int64_t> arg = argmax.to_vector<int64_t>();
  const int64_t per_plane = g.OH * g.OW;
  for (size_t oi = 0; oi < go.size(); ++oi) grad_x[(oi / per_plane) * g.H * g.W + arg[oi]] += go[oi];
  return Tensor::from_vector(grad_x, x_shape, grad_out.dtype());
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  Geometry g = geometry("avg_pool2d", x.shape(), p);
  std::vector<double> xs = x.to_vector<double>(), out(g.N * g.C * g.OH * g.OW, 0.0);
  const double divisor = static_cast<double>(p.kernel[0] * p.kernel[1]);
  for_each_cell(g, [&](int64_t oi, int64_t plane, int64_t i) { out[oi] += xs[plane * g.H * g.W + i] / divisor; });
  return Tensor::from_vector(out, {g.N, g.C, g.OH, g.OW}, x.dtype());
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p) {
  Geometry g = geometry("avg_pool2d_backward", x_shape, p);
  check_grad_out("avg_pool2d_backward", grad_out, {g.N, g.C, g.OH, g.OW});
  std::vector<double> go = grad_out.to_vector<double>(), grad_x(numel(x_shape), 0.0);
  const double divisor = static_cast<double>(p.kernel[0] * p.kernel[1]);
  for_each_cell(g, [&](int64_t oi, int64_t plane, int64_t i) { grad_x[plane * g.H * g.W + i] += go[oi] / divisor; });
  return Tensor::from_vector(grad_x, x_shape, grad_out.dtype());
}

}  // namespace reference

}  // namespace weft::cpu
