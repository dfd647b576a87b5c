#include "weft/kernels/cpu/conv.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

struct Geometry {
  int64_t N, C, H, W;       // input
  int64_t O, Cg, kH, kW;    // weight: C_out, C_in / groups, kernel
  int64_t OH, OW, groups;
  Conv2dParams p;
};

Shape pair(const std::array<int64_t, 2>& a) { return {a[0], a[1]}; }

Geometry geometry(const Shape& x, const Shape& w, const Conv2dParams& p) {
  WEFT_CHECK(x.size() == 4, ShapeError, "conv2d: expected input of rank 4 [N, C_in, H, W], got shape ",
             shape_str(x));
  WEFT_CHECK(w.size() == 4, ShapeError,
             "conv2d: expected weight of rank 4 [C_out, C_in / groups, kH, kW], got shape ", shape_str(w));
  WEFT_CHECK(p.groups >= 1, ValueError, "conv2d: groups must be positive, got ", p.groups);
  for (int i = 0; i < 2; ++i) {
    WEFT_CHECK(p.stride[i] >= 1, ValueError, "conv2d: stride must be positive, got ", shape_str(pair(p.stride)));
    WEFT_CHECK(p.dilation[i] >= 1, ValueError, "conv2d: dilation must be positive, got ",
               shape_str(pair(p.dilation)));
    WEFT_CHECK(p.padding[i] >= 0, ValueError, "conv2d: padding must be non-negative, got ",
               shape_str(pair(p.padding)));
  }
  WEFT_CHECK(x[1] == w[1] * p.groups, ShapeError, "conv2d: input ", shape_str(x), " has ", x[1],
             " channels but weight ", shape_str(w), " with groups=", p.groups, " expects ", w[1] * p.groups,
             " (weight.size(1) * groups)");
  WEFT_CHECK(w[0] % p.groups == 0, ShapeError, "conv2d: weight ", shape_str(w), " has ", w[0],
             " output channels, which groups=", p.groups, " does not divide");
  Geometry g{x[0], x[1], x[2], x[3], w[0], w[1], w[2], w[3], 0, 0, p.groups, p};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    int64_t span = p.dilation[i] * (w[2 + i] - 1) + 1;
    int64_t padded = x[2 + i] + 2 * p.padding[i];
    WEFT_CHECK(w[2 + i] >= 1 && span <= padded, ShapeError, "conv2d: kernel ", w[2], "x", w[3], " with dilation ",
               shape_str(pair(p.dilation)), " does not fit the padded input: input ", shape_str(x), ", weight ",
               shape_str(w), ", padding ", shape_str(pair(p.padding)));
    out[i] = (padded - span) / p.stride[i] + 1;
  }
  g.OH = out[0];
  g.OW = out[1];
  return g;
}

void check_dtypes(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  WEFT_CHECK(is_floating(a.dtype()), DTypeError, op, ": expected a floating dtype, got ", a_name, " ",
             dtype_name(a.dtype()));
  WEFT_CHECK(!b.defined() || b.dtype() == a.dtype(), DTypeError, op, ": ", a_name, " is ", dtype_name(a.dtype()),
             " but ", b_name, " is ", dtype_name(b.dtype()), "; convert them to one dtype");
}

void check_grad_out(const char* op, const Tensor& grad_out, const Geometry& g) {
  Shape expected{g.N, g.O, g.OH, g.OW};
  WEFT_CHECK(grad_out.shape() == expected, ShapeError, op, ": grad_out ", shape_str(grad_out.shape()),
             " does not match the convolution's output shape ", shape_str(expected));
}

// Calls tap(xi, wi, oi) with the flat indices of every input, weight and output element that the
// convolution multiplies together (out[oi] += x[xi] * w[wi]); taps landing in the zero padding
// are skipped. Forward, grad input and grad weight are this one walk with different accumulations.
template <typename Tap>
void for_each_tap(const Geometry& g, Tap&& tap) {
  const int64_t Og = g.O / g.groups;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < g.O; ++o) {
      const int64_t c0 = (o / Og) * g.Cg;  // first input channel of o's group
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t oi = ((n * g.O + o) * g.OH + oh) * g.OW + ow;
          for (int64_t c = 0; c < g.Cg; ++c)
            for (int64_t kh = 0; kh < g.kH; ++kh) {
              const int64_t ih = oh * g.p.stride[0] - g.p.padding[0] + kh * g.p.dilation[0];
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t kw = 0; kw < g.kW; ++kw) {
                const int64_t iw = ow * g.p.stride[1] - g.p.padding[1] + kw * g.p.dilation[1];
                if (iw < 0 || iw >= g.W) continue;
                tap(((n * g.C + c0 + c) * g.H + ih) * g.W + iw, ((o * g.Cg + c) * g.kH + kh) * g.kW + kw, oi);
              }
            }
        }
    }
}

// --- oneDNN ---

// Activations (x, out and their gradients) are channels-last (layout.h): oneDNN's jit kernels
// run on NHWC directly, so a channels-last input (or one with a single channel, which is both
// layouts at once) is read in place and outputs are written where they end up; any other input
// is reordered into NHWC once. Weights are small and take oneDNN's own blocked layout
// (format_tag::any), reordered from OIHW each call. Given plain NCHW descriptors instead, oneDNN
// 2.6 falls back to im2col + gemm, 2-3x slower for the small CNN's layers.
memory::desc any_desc(const memory::dims& dims, memory::data_type dt) {
  return memory::desc(dims, dt, memory::format_tag::any);
}

// Grouped convolutions see the weight as [groups, C_out / groups, C_in / groups, kH, kW].
memory::dims weight_dims(const Geometry& g) {
  if (g.groups == 1) return {g.O, g.Cg, g.kH, g.kW};
  return {g.groups, g.O / g.groups, g.Cg, g.kH, g.kW};
}

struct Descs {
  memory::desc src, weight, dst;  // src and dst NHWC, weight format_tag::any
  memory::dims strides, dilates, padding;
};

Descs descs(const Geometry& g, DType dtype) {
  return {onednn::channels_last_desc({g.N, g.C, g.H, g.W}, dtype), any_desc(weight_dims(g), onednn::data_type(dtype)),
          onednn::channels_last_desc({g.N, g.O, g.OH, g.OW}, dtype),
          {g.p.stride[0], g.p.stride[1]},
          {g.p.dilation[0] - 1, g.p.dilation[1] - 1},  // oneDNN counts the gaps: 0 = dense
          {g.p.padding[0], g.p.padding[1]}};
}

memory::desc bias_desc(const Geometry& g, DType dtype) {
  return memory::desc({g.O}, onednn::data_type(dtype), memory::format_tag::x);
}

// oneDNN ranks its brgemm convolution first for NHWC, but with few input channels per group (an
// image's first layer) its reduction is too short to pay off: on the CNN's first layer (1 -> 32
// channels) the direct jit kernel that comes next takes 0.6 ms against 1.4 (f32) and 0.28 against
// 0.75 (bf16) per batch of 128; from 32 channels up the two are within a few percent.
dnnl::convolution_forward::primitive_desc forward_pd(const Geometry& g, const Descs& d, const memory::desc& bias,
                                                     const dnnl::primitive_attr& attr = {}) {
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, d.src, d.weight,
                                       bias, d.dst, d.strides, d.dilates, d.padding, d.padding);
  dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn::engine());
  if (g.Cg < 16 && std::string_view(pd.impl_info_str()).starts_with("brgconv")) {
    dnnl::convolution_forward::primitive_desc next(desc, attr, onednn::engine());
    if (next.next_impl() && std::string_view(next.impl_info_str()).starts_with("jit")) return next;
  }
  return pd;
}

// ReLU as the convolution's eltwise post-op: applied to each output as it is written, no pass of its own.
dnnl::primitive_attr relu_attr() {
  dnnl::post_ops ops;
  ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

// The reordered copies live in weft tensors (not oneDNN's own allocations), so the caching
// allocator reuses them across steps and MemoryStats counts them; they must outlive the stream's
// work, so each pass keeps them here until it has waited.
struct Buffers {
  std::vector<Tensor> held;
  memory make(const memory::desc& d) {
    held.push_back(Tensor::empty({static_cast<int64_t>(d.get_size())}, DType::u8));
    return onednn::memory(d, held.back());
  }
  memory reordered(memory from, const memory::desc& want) {
    memory m = make(want);
    dnnl::reorder(from, m).execute(onednn::stream(), from, m);
    return m;
  }
};

// An activation as the NHWC memory the primitive wants: t's own bytes when it is channels-last,
// else a copy reordered from t's strides.
memory activation(Buffers& buffers, const Tensor& t, const memory::desc& want) {
  if (is_channels_last(t) && want == onednn::channels_last_desc(t.shape(), t.dtype())) return onednn::memory(want, t);
  memory user = onednn::memory(t);
  return user.get_desc() == want ? user : buffers.reordered(user, want);
}

// The weight (plain, any strides) in the layout the primitive chose.
memory weights(Buffers& buffers, const Tensor& w, const Geometry& g, const memory::desc& want) {
  Tensor wc = w.contiguous_untracked();
  memory user = onednn::memory(onednn::desc(wc, weight_dims(g)), wc);
  return user.get_desc() == want ? user : buffers.reordered(user, want);
}

Tensor onednn_forward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  Tensor bc = b.defined() ? b.contiguous_untracked() : b;
  Tensor out = empty_channels_last({g.N, g.O, g.OH, g.OW}, x.dtype());
  Descs d = descs(g, x.dtype());
  Buffers buffers;
  auto pd = forward_pd(g, d, b.defined() ? bias_desc(g, b.dtype()) : memory::desc(),
                       relu ? relu_attr() : dnnl::primitive_attr());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, activation(buffers, x, d.src)},
                                       {DNNL_ARG_WEIGHTS, weights(buffers, w, g, pd.weights_desc())},
                                       {DNNL_ARG_DST, onednn::memory(d.dst, out)}};
  if (bc.defined()) args[DNNL_ARG_BIAS] = onednn::memory(bias_desc(g, bc.dtype()), bc);
  dnnl::convolution_forward(pd).execute(onednn::stream(), args);
  onednn::stream().wait();
  return out;
}

Tensor onednn_backward_input(const Geometry& g, const Tensor& grad_out, const Tensor& w) {
  Tensor grad_x = empty_channels_last({g.N, g.C, g.H, g.W}, grad_out.dtype());
  Descs d = descs(g, grad_out.dtype());
  Buffers buffers;
  dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, d.src, d.weight, d.dst, d.strides,
                                             d.dilates, d.padding, d.padding);
  dnnl::convolution_backward_data::primitive_desc pd(desc, onednn::engine(), forward_pd(g, d, memory::desc()));
  dnnl::convolution_backward_data(pd).execute(onednn::stream(),
                                              {{DNNL_ARG_DIFF_DST, activation(buffers, grad_out, d.dst)},
                                               {DNNL_ARG_WEIGHTS, weights(buffers, w, g, pd.weights_desc())},
                                               {DNNL_ARG_DIFF_SRC, onednn::memory(d.src, grad_x)}});
  onednn::stream().wait();
  return grad_x;
}

Conv2dWeightGrads onednn_backward_weight(const Geometry& g, const Tensor& grad_out, const Tensor& x, bool with_bias) {
  Conv2dWeightGrads grads{Tensor::empty({g.O, g.Cg, g.kH, g.kW}, grad_out.dtype()), Tensor()};
  Descs d = descs(g, grad_out.dtype());
  Buffers buffers;
  memory::desc bias_md = with_bias ? bias_desc(g, grad_out.dtype()) : memory::desc();
  dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, d.src, d.weight, bias_md, d.dst,
                                                d.strides, d.dilates, d.padding, d.padding);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, onednn::engine(), forward_pd(g, d, bias_md));
  memory user_weight = onednn::memory(onednn::desc(grads.weight, weight_dims(g)), grads.weight);
  memory diff_weight = user_weight.get_desc() == pd.diff_weights_desc() ? user_weight
                                                                          : buffers.make(pd.diff_weights_desc());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, activation(buffers, x, pd.src_desc())},
                                       {DNNL_ARG_DIFF_DST, activation(buffers, grad_out, pd.diff_dst_desc())},
                                       {DNNL_ARG_DIFF_WEIGHTS, diff_weight}};
  if (with_bias) {
    grads.bias = Tensor::empty({g.O}, grad_out.dtype());
    args[DNNL_ARG_DIFF_BIAS] = onednn::memory(bias_md, grads.bias);
  }
  dnnl::convolution_backward_weights(pd).execute(onednn::stream(), args);
  if (diff_weight.get_data_handle() != user_weight.get_data_handle())
    dnnl::reorder(diff_weight, user_weight).execute(onednn::stream(), diff_weight, user_weight);
  onednn::stream().wait();
  return grads;
}

// Where oneDNN has no convolution in the dtype (onednn::computes_in): compute in f32 and round the
// result once.
Tensor to_f32(const Tensor& t) { return t.defined() ? Tensor::empty_like(t, DType::f32).copy_(t) : t; }
Tensor to_dtype(const Tensor& t, DType dtype) {
  return t.defined() ? Tensor::empty_like(t, dtype).copy_(t) : t;
}

// Empty tensors and f64 go to the reference loops: nothing to compute, or gradient checks.
bool use_reference(DType dtype, std::initializer_list<int64_t> sizes) {
  if (dtype == DType::f64) return true;
  for (int64_t n : sizes)
    if (n == 0) return true;
  return false;
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& weight, const Conv2dParams& p) {
  Geometry g = geometry(x, weight, p);
  return {g.N, g.O, g.OH, g.OW};
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, bool relu) {
  Geometry g = geometry(x.shape(), weight.shape(), p);
  check_dtypes("conv2d", x, "input", weight, "weight");
  check_dtypes("conv2d", x, "input", bias, "bias");
  WEFT_CHECK(!bias.defined() || bias.shape() == Shape{g.O}, ShapeError, "conv2d: expected bias of shape [", g.O,
             "] for weight ", shape_str(weight.shape()), ", got ", shape_str(bias.shape()));
  if (use_reference(x.dtype(), {x.numel(), weight.numel()})) return reference::conv2d(x, weight, bias, p, relu);
  if (!onednn::computes_in(x.dtype()))
    return to_dtype(conv2d(to_f32(x), to_f32(weight), to_f32(bias), p, relu), x.dtype());
  return onednn_forward(g, x, weight, bias, relu);
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p) {
  Geometry g = geometry(x_shape, weight.shape(), p);
  check_grad_out("conv2d_backward_input", grad_out, g);
  check_dtypes("conv2d_backward_input", grad_out, "grad_out", weight, "weight");
  if (use_reference(grad_out.dtype(), {grad_out.numel(), weight.numel()}))
    return reference::conv2d_backward_input(grad_out, weight, x_shape, p);
  if (!onednn::computes_in(grad_out.dtype()))
    return to_dtype(conv2d_backward_input(to_f32(grad_out), to_f32(weight), x_shape, p), grad_out.dtype());
  return onednn_backward_input(g, grad_out, weight);
}

Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p) {
  Geometry g = geometry(x.shape(), weight_shape, p);
  check_grad_out("conv2d_backward_weight", grad_out, g);
  check_dtypes("conv2d_backward_weight", grad_out, "grad_out", x, "input");
  if (use_reference(grad_out.dtype(), {grad_out.numel(), x.numel()}))
    return reference::conv2d_backward_weight(grad_out, x, weight_shape, with_bias, p);
  if (!onednn::computes_in(grad_out.dtype())) {
    Conv2dWeightGrads grads = conv2d_backward_weight(to_f32(grad_out), to_f32(x), weight_shape, with_bias, p);
    return {to_dtype(grads.weight, grad_out.dtype()), to_dtype(grads.bias, grad_out.dtype())};
  }
  return onednn_backward_weight(g, grad_out, x, with_bias);
}

namespace reference {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, bool relu) {
  Geometry g = geometry(x.shape(), weight.shape(), p);
  std::vector<double> xs = x.to_vector<double>(), ws = weight.to_vector<double>();
  std::vector<double> out(g.N * g.O * g.OH * g.OW, 0.0);
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { out[oi] += xs[xi] * ws[wi]; });
  if (bias.defined()) {
    std::vector<double> bs = bias.to_vector<double>();
    for (size_t oi = 0; oi < out.size(); ++oi) out[oi] += bs[(oi / (g.OH * g.OW)) % g.O];
  }
  if (relu)
    for (double& v : out) v = std::max(v, 0.0);
  return Tensor::from_vector(out, {g.N, g.O, g.OH, g.OW}, x.dtype());
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p) {
  Geometry g = geometry(x_shape, weight.shape(), p);
  check_grad_out("conv2d_backward_input", grad_out, g);
  std::vector<double> go = grad_out.to_vector<double>(), ws = weight.to_vector<double>();
  std::vector<double> grad_x(numel(x_shape), 0.0);
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { grad_x[xi] += go[oi] * ws[wi]; });
  return Tensor::from_vector(grad_x, x_shape, grad_out.dtype());
}

Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                         bool with_bias, const Conv2dParams& p) {
  Geometry g = geometry(x.shape(), weight_shape, p);
  check_grad_out("conv2d_backward_weight", grad_out, g);
  std::vector<double> go = grad_out.to_vector<double>(), xs = x.to_vector<double>();
  std::vector<double> grad_w(numel(weight_shape), 0.0);
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t oi) { grad_w[wi] += go[oi] * xs[xi]; });
  Conv2dWeightGrads grads{Tensor::from_vector(grad_w, weight_shape, grad_out.dtype()), Tensor()};
  if (with_bias) {
    std::vector<double> grad_b(g.O, 0.0);
    for (size_t oi = 0; oi < go.size(); ++oi) grad_b[(oi / (g.OH * g.OW)) % g.O] += go[oi];
    grads.bias = Tensor::from_vector(grad_b, {g.O}, grad_out.dtype());
  }
  return grads;
}

}  // namespace reference

}  // namespace weft::cpu
