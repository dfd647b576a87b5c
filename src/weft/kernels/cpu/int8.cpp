#include "weft/kernels/cpu/int8.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "weft/core/threads.h"
#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu {

using dnnl::memory;

namespace detail {

// One primitive per input shape (and thread count, which oneDNN fixes at creation), and the
// weight reordered once into each layout those primitives asked for (in practice one).
struct Int8Primitives {
  struct Entry {
    dnnl::primitive primitive;
    memory::desc src, weights_layout, dst;  // the layouts the primitive was built for
    memory weights;                         // the weight in weights_layout
  };
  using Key = std::vector<int64_t>;

  // Entries are handed out by value (dnnl handles are reference counted), so a caller keeps
  // using its primitive while another thread adds one.
  Entry get(const Key& key, const std::function<Entry()>& make) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = by_shape.find(key);
    if (found != by_shape.end()) return found->second;
    if (by_shape.size() >= kCapacity) by_shape.clear();  // shapes keep changing: start over
    Entry entry = make();
    entry.weights = packed(entry.weights_layout);
    return by_shape.emplace(key, entry).first->second;
  }

  memory packed(const memory::desc& want) {
    for (const auto& [desc, bytes] : packed_weights)
      if (desc == want) return onednn::memory(desc, bytes);
    Tensor bytes = Tensor::empty({static_cast<int64_t>(want.get_size())}, DType::u8);
    memory m = onednn::memory(want, bytes);
    dnnl::reorder(user_weights, m).execute(onednn::stream(), user_weights, m);
    onednn::stream().wait();
    packed_weights.emplace_back(want, bytes);
    return m;
  }

  static constexpr size_t kCapacity = 32;
  std::mutex mutex;
  memory user_weights;  // the weight tensor as the layer holds it
  std::map<Key, Entry> by_shape;
  std::vector<std::pair<memory::desc, Tensor>> packed_weights;
};

}  // namespace detail

namespace {

using Entry = detail::Int8Primitives::Entry;

// The most u8 x i8 products an s32 sum holds whatever their values: 255 * 128 * n < 2^31.
constexpr int64_t kMaxTaps = ((int64_t{1} << 31) - 1) / (255 * 128);

void check_weights(const char* what, const Tensor& weight, int64_t rank, const Tensor& weight_scale,
                   const Tensor& bias) {
  WEFT_CHECK(weight.defined() && weight_scale.defined(), ValueError, what, ": undefined weight or weight scale");
  WEFT_CHECK(weight.dtype() == DType::i8 && weight.dim() == rank, DTypeError, what, ": expected an i8 weight of rank ",
             rank, ", got ", dtype_name(weight.dtype()), " ", shape_str(weight.shape()));
  const int64_t out = weight.size(0), taps = out ? weight.numel() / out : 0;
  WEFT_CHECK(taps <= kMaxTaps, ValueError, what, ": ", taps, " products per output (weight ", shape_str(weight.shape()),
             ") could overflow the s32 accumulator; at most ", kMaxTaps, " fit");
  WEFT_CHECK(weight_scale.dtype() == DType::f32 && weight_scale.shape() == Shape{out}, ShapeError, what,
             ": expected an f32 weight scale of shape [", out, "] for weight ", shape_str(weight.shape()), ", got ",
             dtype_name(weight_scale.dtype()), " ", shape_str(weight_scale.shape()));
  for (float s : weight_scale.to_vector<float>())
    WEFT_CHECK(std::isfinite(s) && s > 0, ValueError, what, ": weight scales must be finite and positive, got ", s);
  WEFT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{out}), ShapeError, what,
             ": expected an f32 bias of shape [", out, "], got ", dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
}

void check_input(const char* what, const Tensor& x, const QuantParams& p) {
  WEFT_CHECK(x.defined(), ValueError, what, ": undefined input");
  WEFT_CHECK(x.dtype() == DType::u8, DTypeError, what, ": expected a u8 input (quantize it first), got ",
             dtype_name(x.dtype()), " ", shape_str(x.shape()));
  check_quant_params(p, DType::u8, what);
}

memory::dims ones(size_t rank) { return memory::dims(rank, 1); }

// Weight scales per output channel (dst dim 1) baked in; the input zero point, the input scale
// (a post-op multiply by a scalar) and the bias (a post-op add) come at run time.
dnnl::primitive_attr int8_attr(const std::vector<float>& weight_scale, const memory::desc& scalar,
                               const memory::desc& bias) {
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, weight_scale);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_mul, scalar);
  if (!bias.is_zero()) ops.append_binary(dnnl::algorithm::binary_add, bias);
  attr.set_post_ops(ops);
  return attr;
}

memory::desc bias_desc(const Tensor& bias, size_t rank) {
  if (!bias.defined()) return {};
  memory::dims dims = ones(rank);
  dims[1] = bias.numel();
  return onednn::desc(bias, dims);
}

memory::desc scalar_desc(size_t rank) { return {ones(rank), memory::data_type::f32, memory::dims(rank, 1)}; }

void execute(const Entry& e, const memory& src, const memory& dst, const QuantParams& p, const Tensor& bias,
             size_t rank) {
  int32_t zero_point = p.zero_point;
  float scale = p.scale;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_WEIGHTS, e.weights},
      {DNNL_ARG_DST, dst},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
       memory({{1}, memory::data_type::s32, memory::format_tag::x}, onednn::engine(), &zero_point)},
      {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(scalar_desc(rank), onednn::engine(), &scale)}};
  if (bias.defined()) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = onednn::memory(bias_desc(bias, rank), bias);
  e.primitive.execute(onednn::stream(), args);
  onednn::stream().wait();
}

// Without VNNI (onednn::int8_pairs_saturate) a pair of products such as 255 x -128 overflows the
// 16-bit sum oneDNN's kernels keep. The input is then cut in two, x = lo + hi with lo = min(x, 127)
// and hi = x - lo, both at most 128, so that a pair stays within [-32768, 32512]; the zero point
// likewise; and the two results are added: the same sums, exact, for twice the work. (PyTorch
// instead quantizes activations to 7 bits on such CPUs, its reduce_range.)
struct SplitInput {
  Tensor lo, hi;
  QuantParams lo_params, hi_params;
};

SplitInput split_input(const Tensor& x, const QuantParams& p) {
  SplitInput s{Tensor::empty(x.shape(), DType::u8), Tensor::empty(x.shape(), DType::u8), p, p};
  const uint8_t* in = x.data<uint8_t>();
  uint8_t *lo = s.lo.data<uint8_t>(), *hi = s.hi.data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    lo[i] = std::min<uint8_t>(in[i], 127);
    hi[i] = static_cast<uint8_t>(in[i] - lo[i]);
  }
  s.lo_params.zero_point = std::min(p.zero_point, 127);
  s.hi_params.zero_point = p.zero_point - s.lo_params.zero_point;
  return s;
}

// `run(input, params, bias, out)` once, or on a CPU whose int8 sums saturate once for each half of
// the input (split_input), the second half without the bias, added.
template <typename Run>
void run_exactly(const Tensor& x, const QuantParams& p, const Tensor& bias, Tensor& y, const Run& run) {
  if (!onednn::int8_pairs_saturate()) {
    run(x, p, bias, y);
    return;
  }
  const SplitInput s = split_input(x, p);
  run(s.lo, s.lo_params, bias, y);
  Tensor rest = Tensor::empty(y.shape(), DType::f32);
  run(s.hi, s.hi_params, bias.defined() ? Tensor::zeros(bias.shape(), DType::f32) : bias, rest);
  float* out = y.data<float>();
  const float* add = rest.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) out[i] += add[i];
}

}  // namespace

// --- linear ---

Int8Linear::Int8Linear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias)
    : primitives_(std::make_unique<detail::Int8Primitives>()) {
  check_weights("Int8Linear", weight, 2, weight_scale, bias);
  out_ = weight.size(0);
  in_ = weight.size(1);
  WEFT_CHECK(in_ > 0 && out_ > 0, ShapeError, "Int8Linear: the weight must be non-empty, got ",
             shape_str(weight.shape()));
  weight_ = weight.contiguous_untracked();
  weight_scale_ = weight_scale.to_vector<float>();
  bias_ = bias.defined() ? bias.contiguous_untracked() : bias;
  // The weight [N, K] row-major is the matmul's [K, N] operand read column-major.
  primitives_->user_weights = onednn::memory(
      memory::desc({in_, out_}, memory::data_type::s8, memory::format_tag::ba), weight_);
}

Int8Linear::~Int8Linear() = default;

Tensor Int8Linear::forward(const Tensor& x, const QuantParams& x_params) const {
  check_input("Int8Linear", x, x_params);
  WEFT_CHECK(x.dim() == 2 && x.size(1) == in_, ShapeError, "Int8Linear: expected input [M, ", in_, "], got ",
             shape_str(x.shape()));
  const int64_t rows = x.size(0);
  Tensor y = Tensor::empty({rows, out_}, DType::f32);
  if (rows == 0) return y;
  Tensor xc = x.contiguous_untracked();
  Entry e = primitives_->get(
      {rows, get_num_threads()},
      [&] {
        memory::desc src({rows, in_}, memory::data_type::u8, memory::format_tag::ab);
        memory::desc weights({in_, out_}, memory::data_type::s8, memory::format_tag::any);
        memory::desc dst({rows, out_}, memory::data_type::f32, memory::format_tag::ab);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, memory::desc(), dst),
                                        int8_attr(weight_scale_, scalar_desc(2), bias_desc(bias_, 2)),
                                        onednn::engine());
        return Entry{dnnl::matmul(pd), src, pd.weights_desc(), dst, {}};
      });
  run_exactly(xc, x_params, bias_, y, [&](const Tensor& in, const QuantParams& p, const Tensor& bias, Tensor& out) {
    execute(e, onednn::memory(e.src, in), onednn::memory(e.dst, out), p, bias, 2);
  });
  return y;
}

// --- conv2d ---

namespace {

// Grouped convolutions see the weight as [groups, O / groups, C / groups, kH, kW].
memory::dims conv_weight_dims(const Tensor& weight, int64_t groups) {
  const Shape& w = weight.shape();
  if (groups == 1) return {w[0], w[1], w[2], w[3]};
  return {groups, w[0] / groups, w[1], w[2], w[3]};
}

}  // namespace

Int8Conv2d::Int8Conv2d(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias, const Conv2dParams& params)
    : params_(params), primitives_(std::make_unique<detail::Int8Primitives>()) {
  check_weights("Int8Conv2d", weight, 4, weight_scale, bias);
  // Checks groups, stride, padding and dilation on the smallest input the kernel fits.
  conv2d_output_shape({1, weight.size(1) * params.groups, params.dilation[0] * (weight.size(2) - 1) + 1,
                       params.dilation[1] * (weight.size(3) - 1) + 1},
                      weight.shape(), params);
  weight_ = weight.contiguous_untracked();
  weight_scale_ = weight_scale.to_vector<float>();
  bias_ = bias.defined() ? bias.contiguous_untracked() : bias;
  primitives_->user_weights = onednn::memory(onednn::desc(weight_, conv_weight_dims(weight_, params.groups)), weight_);
}

Int8Conv2d::~Int8Conv2d() = default;

Tensor Int8Conv2d::forward(const Tensor& x, const QuantParams& x_params) const {
  check_input("Int8Conv2d", x, x_params);
  const Shape out_shape = conv2d_output_shape(x.shape(), weight_.shape(), params_);
  Tensor y = Tensor::empty(out_shape, DType::f32);
  if (y.numel() == 0) return y;
  Tensor xc = x.contiguous_untracked();
  const memory::dims src_dims(x.shape().begin(), x.shape().end()), dst_dims(out_shape.begin(), out_shape.end());
  Entry e = primitives_->get(
      {x.size(0), x.size(1), x.size(2), x.size(3), get_num_threads()},
      [&] {
        auto any = [](const memory::dims& dims, memory::data_type dt) {
          return memory::desc(dims, dt, memory::format_tag::any);
        };
        const Conv2dParams& p = params_;
        dnnl::convolution_forward::desc desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, any(src_dims, memory::data_type::u8),
            any(conv_weight_dims(weight_, p.groups), memory::data_type::s8), memory::desc(),
            any(dst_dims, memory::data_type::f32), {p.stride[0], p.stride[1]},
            {p.dilation[0] - 1, p.dilation[1] - 1},  // oneDNN counts the gaps
            {p.padding[0], p.padding[1]}, {p.padding[0], p.padding[1]});
        dnnl::convolution_forward::primitive_desc pd(
            desc, int8_attr(weight_scale_, scalar_desc(4), bias_desc(bias_, 4)), onednn::engine());
        return Entry{dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), {}};
      });
  // The activations go in and come out in the primitive's blocked layouts (nhwc-like for VNNI):
  // reordering the u8 input costs a quarter of what reordering f32 would.
  run_exactly(xc, x_params, bias_, y, [&](const Tensor& in, const QuantParams& p, const Tensor& bias, Tensor& out) {
    std::vector<Tensor> held;
    auto buffer = [&](const memory::desc& d) {
      held.push_back(Tensor::empty({static_cast<int64_t>(d.get_size())}, DType::u8));
      return onednn::memory(d, held.back());
    };
    memory user_src = onednn::memory(onednn::desc(in, src_dims), in);
    memory src = user_src;
    if (user_src.get_desc() != e.src) {
      src = buffer(e.src);
      dnnl::reorder(user_src, src).execute(onednn::stream(), user_src, src);
    }
    memory user_dst = onednn::memory(onednn::desc(out, dst_dims), out);
    memory dst = user_dst.get_desc() == e.dst ? user_dst : buffer(e.dst);
    execute(e, src, dst, p, bias, 4);
    if (dst.get_data_handle() != user_dst.get_data_handle()) {
      dnnl::reorder(dst, user_dst).execute(onednn::stream(), dst, user_dst);
      onednn::stream().wait();
    }
  });
  return y;
}

// --- reference ---

namespace reference {

Tensor int8_linear(const Tensor& x, const QuantParams& x_params, const Tensor& weight, const Tensor& weight_scale,
                   const Tensor& bias) {
  check_weights("int8_linear", weight, 2, weight_scale, bias);
  check_input("int8_linear", x, x_params);
  const int64_t M = x.size(0), K = weight.size(1), N = weight.size(0);
  WEFT_CHECK(x.dim() == 2 && x.size(1) == K, ShapeError, "int8_linear: expected input [M, ", K, "], got ",
             shape_str(x.shape()));
  std::vector<int32_t> xs = x.to_vector<int32_t>(), ws = weight.to_vector<int32_t>();
  std::vector<double> scales = weight_scale.to_vector<double>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(N, 0.0);
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (xs[m * K + k] - x_params.zero_point) * ws[n * K + k];
      y[m * N + n] = static_cast<float>(double(x_params.scale) * scales[n] * acc + b[n]);
    }
  return Tensor::from_vector(y, {M, N});
}

Tensor int8_conv2d(const Tensor& x, const QuantParams& x_params, const Tensor& weight, const Tensor& weight_scale,
                   const Tensor& bias, const Conv2dParams& p) {
  check_weights("int8_conv2d", weight, 4, weight_scale, bias);
  check_input("int8_conv2d", x, x_params);
  const Shape out_shape = conv2d_output_shape(x.shape(), weight.shape(), p);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = weight.size(0), Cg = weight.size(1), kH = weight.size(2), kW = weight.size(3);
  const int64_t OH = out_shape[2], OW = out_shape[3], Og = O / p.groups;
  std::vector<int32_t> xs = x.to_vector<int32_t>(), ws = weight.to_vector<int32_t>();
  std::vector<double> scales = weight_scale.to_vector<double>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(O, 0.0);
  std::vector<float> y(numel(out_shape));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t c0 = (o / Og) * Cg;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int32_t acc = 0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < kH; ++kh) {
              const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (iw < 0 || iw >= W) continue;
                acc += (xs[((n * C + c0 + c) * H + ih) * W + iw] - x_params.zero_point) *
                       ws[((o * Cg + c) * kH + kh) * kW + kw];
              }
            }
          y[((n * O + o) * OH + oh) * OW + ow] = static_cast<float>(double(x_params.scale) * scales[o] * acc + b[o]);
        }
    }
  return Tensor::from_vector(y, out_shape);
}

}  // namespace reference

}  // namespace weft::cpu
