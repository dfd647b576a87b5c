#include "weft/memory/model.h"

#include <algorithm>
#include <span>

#include "weft/core/flag_value.h"
#include "weft/nn/layers.h"
#include "weft/nn/models.h"

namespace weft::memory {

namespace {

using Value = ActivationTape::Value;
using Grad = ActivationTape::Grad;
using Op = ActivationTape::Op;

// Sizes multiply quickly (batch x heads x seq^2): an overflow is an implausible plan, not a number.
constexpr const char* kTooLarge =
    "plan: the sizes given make a tensor of more than 2^63 bytes; check --batch-size, --context, --dim, --heads and "
    "--vocab";

int64_t product(std::span<const int64_t> factors) {
  int64_t result = 1;
  for (int64_t f : factors) WEFT_CHECK(!__builtin_mul_overflow(result, f, &result), ValueError, kTooLarge);
  return result;
}

int64_t product(std::initializer_list<int64_t> factors) { return product(std::span(factors.begin(), factors.size())); }

Value view(ActivationTape& tape, std::string name, Value x, int64_t bytes, Grad grad) {
  return tape.record({.name = std::move(name), .inputs = {x}, .grads = {grad}, .output_bytes = bytes, .view = true});
}

// linear, relu, gelu: the backward reads the input (linear's weight gradient, the activations'
// derivatives), so the op keeps it.
Value keeps_input(ActivationTape& tape, std::string name, Value x, Grad grad, int64_t out_bytes, int64_t params = 0) {
  return tape.record({.name = std::move(name), .inputs = {x}, .grads = {grad}, .output_bytes = out_bytes, .saved = {x},
                      .param_grads = params});
}

// layer_norm keeps x and the per-row mean and rstd (f32) for its backward.
Value layer_norm(ActivationTape& tape, std::string name, Value x, int64_t rows, int64_t features) {
  return tape.record({.name = std::move(name), .inputs = {x}, .grads = {Grad::fresh}, .output_bytes = tape.bytes(x),
                      .saved = {x}, .saved_extra_bytes = product({2, rows, 4}), .param_grads = 2 * features});
}

// cross_entropy keeps the logits and the per-row log-sum-exp (f32); it makes the per-row losses
// and a copy of the targets while it runs. In mixed precision the logits go in as f32 (autocast
// runs the loss in f32), through a cast whose backward makes the 16-bit gradient.
Value cross_entropy(ActivationTape& tape, Value logits, Value targets, int64_t rows, int64_t classes,
                    const ActivationFormat& format) {
  if (format.fp32_ops != format.element)
    logits = tape.record({.name = "logits to f32", .inputs = {logits}, .grads = {Grad::fresh},
                          .output_bytes = product({rows, classes, format.fp32_ops})});
  const int64_t row_scratch = product({rows, 8 + 4});
  return tape.record({.name = "cross_entropy", .inputs = {logits, targets}, .grads = {Grad::fresh, Grad::none},
                      .output_bytes = 4, .saved = {logits}, .saved_extra_bytes = product({rows, 4}),
                      .forward_scratch_bytes = row_scratch, .backward_scratch_bytes = row_scratch});
}

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

// Builds the tape of one classifier step layer by layer, following the shape of the activation.
class ClassifierRecorder {
 public:
  ClassifierRecorder(ActivationTape& tape, const ActivationFormat& format, Shape shape, Value x)
      : tape_(tape), e_(format.element), shape_(std::move(shape)), x_(x) {}

  void add(const std::string& name, const nn::Module& layer) {
    const std::string label = str(name, " ", layer.name());
    const Grad grad = x_needs_grad_ ? Grad::fresh : Grad::none;
    if (auto* flatten = dynamic_cast<const nn::Flatten*>(&layer)) {
      const int64_t rank = static_cast<int64_t>(shape_.size());
      const int64_t first = flatten->start_dim < 0 ? flatten->start_dim + rank : flatten->start_dim;
      const int64_t last = flatten->end_dim < 0 ? flatten->end_dim + rank : flatten->end_dim;
      WEFT_CHECK(first >= 0 && first <= last && last < rank, ShapeError, "plan: ", label, " cannot flatten dims ",
                 flatten->start_dim, "..", flatten->end_dim, " of ", shape_str(shape_));
      Shape flat(shape_.begin(), shape_.begin() + first);
      flat.push_back(product({numel(Shape(shape_.begin() + first, shape_.begin() + last + 1))}));
      flat.insert(flat.end(), shape_.begin() + last + 1, shape_.end());
      shape_ = flat;
      if (channels_last_) {  // a channels-last activation is copied to flatten it
        x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {Grad::fresh}, .output_bytes = tape_.bytes(x_)});
        channels_last_ = false;
      } else {
        x_ = view(tape_, label, x_, tape_.bytes(x_), Grad::forwarded);
      }
    } else if (auto* linear = dynamic_cast<const nn::Linear*>(&layer)) {
      WEFT_CHECK(shape_.back() == linear->in_features, ShapeError, "plan: ", label, " expects ", linear->in_features,
                 " features, the activation before it is ", shape_str(shape_));
      shape_.back() = linear->out_features;
      x_ = keeps_input(tape_, label, x_, grad, bytes(), layer.num_parameters());
    } else if (auto* conv = dynamic_cast<const nn::Conv2d*>(&layer)) {
      add_conv(label, *conv, false, nullptr);
    } else if (auto* pool = dynamic_cast<const nn::MaxPool2d*>(&layer)) {
      pool_shape(label, *pool);
      // The backward needs only oneDNN's workspace: one byte per output element saying which input won.
      x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {grad}, .output_bytes = bytes(),
                         .saved_extra_bytes = numel(shape_)});
    } else if (dynamic_cast<const nn::ReLU*>(&layer) || dynamic_cast<const nn::GELU*>(&layer)) {
      x_ = keeps_input(tape_, label, x_, grad, bytes());
    } else if (auto* dropout = dynamic_cast<const nn::Dropout*>(&layer)) {
      if (dropout->p == 0) return;  // dropout(x, 0) returns x itself
      x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {grad}, .output_bytes = bytes(),
                         .saved_extra_bytes = numel(shape_)});  // the u8 keep-mask
    } else if (auto* norm = dynamic_cast<const nn::BatchNorm2d*>(&layer)) {
      WEFT_CHECK(shape_.size() == 4 && shape_[1] == norm->num_features, ShapeError, "plan: ", label,
                 " expects [N, ", norm->num_features, ", H, W], the activation before it is ", shape_str(shape_));
      x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {Grad::fresh}, .output_bytes = bytes(), .saved = {x_},
                         .saved_extra_bytes = product({2, norm->num_features, 4}), .param_grads = layer.num_parameters()});
    } else if (auto* norm = dynamic_cast<const nn::LayerNorm*>(&layer)) {
      const int64_t features = numel(norm->normalized_shape);
      x_ = layer_norm(tape_, label, x_, numel(shape_) / features, features);
    } else {
      throw ValueError(str("plan: cannot estimate the activations of layer ", label,
                           "; the planner knows Linear, Conv2d, MaxPool2d, ReLU, GELU, Flatten, Dropout, BatchNorm2d "
                           "and LayerNorm"));
    }
    x_needs_grad_ = x_needs_grad_ || layer.num_parameters() > 0;
  }

  // The image blocks nn::Sequential runs as one op (nn/container.h): a Conv2d and a ReLU as
  // conv2d_relu, with a MaxPool2d after them as conv2d_relu_max_pool2d.
  void add_fused(const std::string& name, const nn::Conv2d& conv, const nn::MaxPool2d* pool) {
    add_conv(str(name, " ", conv.name(), pool ? " + ReLU + MaxPool2d" : " + ReLU"), conv, true, pool);
    x_needs_grad_ = true;
  }

  Value output() const { return x_; }
  const Shape& shape() const { return shape_; }

 private:
  // Convolutions write channels-last activations and read them in place (kernels/cpu/layout.h);
  // what they copy is the weight, reordered to oneDNN's blocked layout, and an input in another
  // layout with more than one channel (a 3-channel batch). Fused with a ReLU, the output is kept for
  // the backward's mask, which makes a full-size gradient; fused with the pooling too, the
  // full-size output lives only while the op runs, and the backward keeps the pooled output and
  // the workspace, masks the pooled gradient and routes it back to a full-size one.
  void add_conv(const std::string& label, const nn::Conv2d& conv, bool relu, const nn::MaxPool2d* pool) {
    WEFT_CHECK(shape_.size() == 4 && shape_[1] == conv.in_channels, ShapeError, "plan: ", label, " expects [N, ",
               conv.in_channels, ", H, W], the activation before it is ", shape_str(shape_));
    const Grad grad = x_needs_grad_ ? Grad::fresh : Grad::none;
    const int64_t in_bytes = bytes();
    shape_ = {shape_[0], conv.out_channels,
              conv_output_size(shape_[2], conv.kernel_size.h, conv.stride.h, conv.padding.h, conv.dilation.h),
              conv_output_size(shape_[3], conv.kernel_size.w, conv.stride.w, conv.padding.w, conv.dilation.w)};
    check_spatial(label);
    const int64_t out_bytes = bytes();
    const int64_t copies =
        product({conv.weight.numel(), e_}) + (!channels_last_ && conv.in_channels > 1 ? in_bytes : 0);
    channels_last_ = true;
    const int64_t params = conv.num_parameters();
    if (!pool) {
      x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {grad}, .output_bytes = out_bytes, .saved = {x_},
                         .saves_output = relu, .forward_scratch_bytes = copies,
                         .backward_scratch_bytes = copies + (relu ? out_bytes : 0), .param_grads = params});
      return;
    }
    pool_shape(label, *pool);
    x_ = tape_.record({.name = label, .inputs = {x_}, .grads = {grad}, .output_bytes = bytes(), .saved = {x_},
                       .saves_output = true, .saved_extra_bytes = numel(shape_),
                       .forward_scratch_bytes = copies + out_bytes,
                       .backward_scratch_bytes = copies + out_bytes + bytes(), .param_grads = params});
  }

  void pool_shape(const std::string& label, const nn::MaxPool2d& pool) {
    WEFT_CHECK(shape_.size() == 4, ShapeError, "plan: ", label, " expects [N, C, H, W], got ", shape_str(shape_));
    const int64_t stride_h = pool.stride.h > 0 ? pool.stride.h : pool.kernel_size.h;
    const int64_t stride_w = pool.stride.w > 0 ? pool.stride.w : pool.kernel_size.w;
    shape_[2] = conv_output_size(shape_[2], pool.kernel_size.h, stride_h, pool.padding.h, 1);
    shape_[3] = conv_output_size(shape_[3], pool.kernel_size.w, stride_w, pool.padding.w, 1);
    check_spatial(label);
  }

  int64_t bytes() const { return product({numel(shape_), e_}); }
  void check_spatial(const std::string& label) const {
    WEFT_CHECK(shape_[2] > 0 && shape_[3] > 0, ShapeError, "plan: ", label, " leaves no output pixels (",
               shape_str(shape_), "); the sample is too small for the layers");
  }

  ActivationTape& tape_;
  int64_t e_;
  Shape shape_;
  Value x_;
  bool x_needs_grad_ = false;  // the batch needs no gradient; what a layer with parameters makes does
  bool channels_last_ = false;  // the batch is plain NCHW; convolutions make channels-last activations
};

// Named as `weft plan` and `weft train` name nn::GPTConfig's fields: --dim, --context.
void check_plannable(const nn::GPTConfig& c) {
  // More layers would only make the plan slow (a list of every tensor): no GPT weft trains has them.
  check_flag("--layers", c.layers, {.min = 1, .max = nn::kMaxGptLayers});
  for (auto [flag, value] : {std::pair{"--dim", c.dim}, std::pair{"--heads", c.heads}, std::pair{"--vocab", c.vocab},
                             std::pair{"--context", c.context}})
    check_flag(flag, value, {.min = 1, .max = kMaxPlanCount});
  WEFT_CHECK(c.dim % c.heads == 0, ValueError, "--heads: must divide --dim (", c.dim,
             ") so that each head gets hidden / heads dimensions, got '", c.heads, "'");
  product({c.vocab, c.dim, 16});
  product({c.layers, gpt_block_parameters(c), 16});
}

}  // namespace

int64_t gpt_block_parameters(const nn::GPTConfig& c) {
  int64_t total = 0;
  for (const nn::GPTBlockParameter& p : c.block_parameters())
    WEFT_CHECK(!__builtin_add_overflow(total, product(p.shape), &total), ValueError, kTooLarge);
  return total;
}

int64_t gpt_parameters(const nn::GPTConfig& c) {
  return product({c.vocab, c.dim}) + product({c.context, c.dim}) + product({c.layers, gpt_block_parameters(c)}) +
         2 * c.dim;
}

Value record_transformer_block(ActivationTape& tape, Value x, const BlockShape& s, const ActivationFormat& format,
                               const std::string& name) {
  const int64_t rows = product({s.batch, s.seq}), D = s.hidden, e = format.element, tp = s.tp;
  const int64_t act = product({rows, D, e});  // one [B, T, D] activation
  const int64_t part = act / tp;              // a rank's [B, T, D / tp]
  // copy_to_parallel_region: the input itself; its backward sums the ranks' gradients into a copy.
  auto copy_to = [&](const std::string& label, Value v) {
    return tp == 1 ? v : view(tape, label + ".copy_to_parallel_region", v, act, Grad::fresh);
  };
  // A row-parallel layer's partial [B, T, D] output, summed over the ranks into a private copy
  // (reduce_from_parallel_region), then its bias added once.
  auto row_parallel = [&](const std::string& label, Value input, int64_t weight_params) {
    if (tp == 1) return keeps_input(tape, label, input, Grad::fresh, act, weight_params + D);
    Value partial = keeps_input(tape, label + ".linear", input, Grad::fresh, act, weight_params);
    Value summed = tape.record({.name = label + ".reduce_from_parallel_region", .inputs = {partial},
                                .grads = {Grad::forwarded}, .output_bytes = act});
    return tape.record(
        {.name = label + ".bias", .inputs = {summed}, .grads = {Grad::forwarded}, .output_bytes = act, .param_grads = D});
  };
  Value ln_1 = layer_norm(tape, name + ".ln_1", x, rows, D);
  Value qkv = keeps_input(tape, name + ".attn.c_attn", copy_to(name + ".attn.c_attn", ln_1), Grad::fresh,
                          product({3, part}), (3 * D * D + 3 * D) / tp);
  // split() is three narrow views; a narrow's backward scatters its gradient into a zero-filled
  // tensor of qkv's size. Each piece is viewed as [B, T, H, d] and transposed to [B, H, T, d]; the
  // gradient arriving at the view is transposed, so reshaping it back copies.
  Value pieces[3], heads[3];
  const char* piece_names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) pieces[i] = view(tape, str(name, ".attn.", piece_names[i]), qkv, part, Grad::fresh);
  for (int i = 0; i < 3; ++i) {
    Value shaped = view(tape, str(name, ".attn.", piece_names[i], ".view"), pieces[i], part, Grad::fresh);
    heads[i] = view(tape, str(name, ".attn.", piece_names[i], ".transpose"), shaped, part, Grad::forwarded);
  }
  // The fused attention reads the head views in place and keeps them (so qkv stays alive), its
  // output and one f32 log-sum-exp per query row; no [T, T] tensor exists. Its backward reads the
  // incoming (transposed) gradient in place and makes fresh dq, dk, dv.
  Value attended = tape.record({.name = name + ".attn.sdpa", .inputs = {heads[0], heads[1], heads[2]},
                                .grads = {Grad::fresh, Grad::fresh, Grad::fresh}, .output_bytes = part,
                                .saved = {heads[0], heads[1], heads[2]}, .saves_output = true,
                                .saved_extra_bytes = product({s.batch, s.heads / tp, s.seq, 4})});
  Value merged = view(tape, name + ".attn.transpose", attended, part, Grad::forwarded);
  merged = tape.record({.name = name + ".attn.contiguous", .inputs = {merged}, .grads = {Grad::forwarded},
                        .output_bytes = part});
  merged = view(tape, name + ".attn.view", merged, part, Grad::forwarded);
  Value attn_out = row_parallel(name + ".attn.c_proj", merged, D * D / tp);
  // A module's input lives until the module returns (the caller holds it): under autograd ln_1, ln_2
  // and the block's input are kept for the backward anyway; in inference these views hold them.
  view(tape, name + ".attn returns", ln_1, tape.bytes(ln_1), Grad::none);
  Value h = tape.record({.name = name + ".residual_1", .inputs = {x, attn_out},
                         .grads = {Grad::forwarded, Grad::forwarded}, .output_bytes = act});
  Value ln_2 = layer_norm(tape, name + ".ln_2", h, rows, D);
  Value fc = keeps_input(tape, name + ".mlp.c_fc", copy_to(name + ".mlp.c_fc", ln_2), Grad::fresh, product({4, part}),
                         (4 * D * D + 4 * D) / tp);
  Value gelu = keeps_input(tape, name + ".mlp.gelu", fc, Grad::fresh, product({4, part}));
  Value mlp_out = row_parallel(name + ".mlp.c_proj", gelu, 4 * D * D / tp);
  view(tape, name + ".mlp returns", ln_2, tape.bytes(ln_2), Grad::none);
  Value out = tape.record({.name = name + ".residual_2", .inputs = {h, mlp_out},
                           .grads = {Grad::forwarded, Grad::forwarded}, .output_bytes = act});
  view(tape, name + " returns", x, tape.bytes(x), Grad::none);
  return out;
}

ModelDescription ModelDescription::parameters_only(int64_t count) {
  WEFT_CHECK(count > 0, ValueError, "plan: --params must be a positive number of parameters, got ", count);
  ModelDescription m;
  m.name_ = "a parameter count";
  m.num_parameters_ = count;
  return m;
}

ModelDescription ModelDescription::builtin(const std::string& name) {
  if (name == "gpt2") return gpt(kGpt2Small);
  const std::optional<nn::ModelKind> kind = nn::find_model_kind(name);
  WEFT_CHECK(kind.has_value(), ValueError, "plan: unknown model '", name, "': expected ", builtin_model_names());
  if (*kind == nn::ModelKind::gpt) return gpt(nn::GPTConfig{});
  return classifier(name, nn::make_image_classifier(*kind), {1, 28, 28});
}

const char* builtin_model_names() { return "mlp, cnn, gpt or gpt2"; }

ModelDescription ModelDescription::gpt(const nn::GPTConfig& config, GptShare share) {
  check_plannable(config);
  const int64_t tp = share.tp, pp = share.pp;
  WEFT_CHECK(tp >= 1 && config.heads % tp == 0 && config.vocab % tp == 0, ValueError, "--tp ", tp, ": the GPT's ",
             config.heads, " heads and vocabulary of ", config.vocab,
             " must split evenly over the tensor-parallel ranks (--heads and --vocab multiples of --tp)");
  WEFT_CHECK(pp >= 1 && pp <= config.layers, ValueError, "--pp ", pp, ": the GPT's ", config.layers,
             " blocks cannot make ", pp, " stages (--layers must be at least --pp)");
  WEFT_CHECK(share.stage >= 0 && share.stage < pp, ValueError, "plan: stage ", share.stage, " of ", pp);
  ModelDescription m;
  m.name_ = str("gpt (", config.layers, " layers, hidden ", config.dim, ", ", config.heads, " heads, vocab ",
                config.vocab, ", context ", config.context, ")");
  if (tp > 1) m.name_ += str(", a 1/", tp, " tensor-parallel share");
  if (pp > 1) m.name_ += str(", stage ", share.stage, " of ", pp);
  const int64_t D = config.dim, V = config.vocab / tp;
  const nn::GPTPartition partition{config.layers, pp};
  const bool first = partition.holds_embeddings(share.stage), last = partition.holds_head(share.stage);
  // In the order of the stage's parameters (dist::GPTStage): the tables (the last stage's copy of
  // the tied one), the blocks, the final norm; ZeRO's and DDP's buckets follow it.
  if (first) m.parameter_tensors_ = {product({V, D}), product({config.context, D})};
  if (last && !first) m.parameter_tensors_.push_back(product({V, D}));
  const std::vector<nn::GPTBlockParameter> block = config.block_parameters();
  for (int64_t i = partition.first_block(share.stage); i < partition.first_block(share.stage + 1); ++i)
    for (const nn::GPTBlockParameter& p : block) m.parameter_tensors_.push_back(product(p.shape) / (p.tp_split ? tp : 1));
  if (last) m.parameter_tensors_.insert(m.parameter_tensors_.end(), {D, D});  // ln_f
  for (int64_t numel : m.parameter_tensors_) m.num_parameters_ += numel;
  m.largest_unit_ = std::max({gpt_block_parameters(config) / tp, first || last ? product({V, D}) : 0,
                              first ? product({config.context, D}) : 0});
  m.gpt_ = config;
  m.share_ = share;
  return m;
}

ModelDescription ModelDescription::classifier(std::string name, std::shared_ptr<nn::Sequential> model,
                                              Shape sample_shape) {
  ModelDescription m;
  m.name_ = std::move(name);
  m.num_parameters_ = model->num_parameters();
  for (const Tensor& p : model->parameters()) m.parameter_tensors_.push_back(p.numel());
  for (const auto& [child_name, child] : model->named_children())
    m.largest_unit_ = std::max(m.largest_unit_, child->num_parameters());
  m.classifier_ = std::move(model);
  m.sample_shape_ = std::move(sample_shape);
  m.step_tape(1, {}, false);  // checks now that every layer is known and the shapes chain
  return m;
}

ActivationTape ModelDescription::inference_tape(int64_t batch, int64_t seq, const ActivationFormat& format) const {
  WEFT_CHECK(gpt_ && share_.tp == 1 && share_.pp == 1, ValueError, "plan --inference: ", name_,
             " is not a GPT; describe one (--model gpt or gpt2, or --layers --dim --heads --vocab --context)");
  const nn::GPTConfig& c = *gpt_;
  const int64_t rows = product({batch, seq}), act = product({rows, c.dim, format.element});
  ActivationTape tape;
  Value tokens = tape.input(product({rows, 8}));
  Value positions = tape.input(product({rows, 8}));
  Value tok = tape.record({.name = "wte", .inputs = {tokens}, .grads = {Grad::none}, .output_bytes = act});
  Value pos = tape.record({.name = "wpe", .inputs = {positions}, .grads = {Grad::none},
                           .output_bytes = product({seq, c.dim, format.element})});
  Value x = tape.record({.name = "wte + wpe", .inputs = {tok, pos}, .grads = {Grad::none, Grad::none}, .output_bytes = act});
  const Value stack_input = x;
  for (int64_t i = 0; i < c.layers; ++i)
    x = record_transformer_block(tape, x, BlockShape{batch, seq, c.dim, c.heads}, format, str("h.", i));
  // The stack's input lives until the stack returns: the caller's variable and h's hooks hold it.
  view(tape, "h returns", stack_input, tape.bytes(stack_input), Grad::none);
  x = layer_norm(tape, "ln_f", x, rows, c.dim);
  tape.hold(keeps_input(tape, "lm_head", x, Grad::none, product({rows, c.vocab, format.element})));
  return tape;
}

ActivationTape ModelDescription::step_tape(int64_t batch, const ActivationFormat& format, bool checkpointed) const {
  WEFT_CHECK(knows_activations(), ValueError, "plan: the activations of ", name_,
             " are unknown; describe the architecture (--model, or --layers --dim --heads --vocab --context)");
  WEFT_CHECK(batch > 0, ValueError, "plan: the batch per device must be positive, got ", batch);
  ActivationTape tape;
  if (gpt_) {
    const nn::GPTConfig& c = *gpt_;
    const int64_t tp = share_.tp, V = c.vocab / tp;
    const nn::GPTPartition partition{c.layers, share_.pp};
    const bool first = partition.holds_embeddings(share_.stage), last = partition.holds_head(share_.stage);
    const int64_t rows = product({batch, c.context}), e = format.element, act = product({rows, c.dim, e});
    Value tokens = tape.input(product({rows, 8}));
    Value targets = tape.input(product({rows, 8}));
    Value x;
    if (first) {
      Value positions = tape.input(product({c.context, 8}));
      // The output projection is the token embedding's weight: with the head on this rank its
      // gradient arrives first from the head, the embedding's backward then makes a second
      // [vocab, hidden] gradient and the engine allocates their sum.
      const int64_t tied_sum = last ? product({2, V, c.dim, e}) : 0, own_grad = last ? 0 : product({V, c.dim});
      Value tok;
      if (tp == 1) {
        tok = tape.record({.name = "wte", .inputs = {tokens}, .grads = {Grad::none}, .output_bytes = act,
                           .saved = {tokens}, .backward_scratch_bytes = tied_sum, .param_grads = own_grad});
      } else {  // the rank's rows for its ids, the others' zeroed by a mask, summed over the ranks
        Value local = tape.record({.name = "wte.local_ids", .inputs = {tokens}, .grads = {Grad::none},
                                   .output_bytes = product({rows, 8})});
        Value mask = tape.record({.name = "wte.mask", .inputs = {tokens}, .grads = {Grad::none},
                                  .output_bytes = product({rows, e})});
        Value looked_up = tape.record({.name = "wte", .inputs = {local}, .grads = {Grad::none}, .output_bytes = act,
                                       .saved = {local}, .backward_scratch_bytes = tied_sum, .param_grads = own_grad});
        Value masked = tape.record({.name = "wte.masked", .inputs = {looked_up, mask}, .grads = {Grad::fresh, Grad::none},
                                    .output_bytes = act, .saved = {looked_up, mask}});
        tok = tape.record({.name = "wte.reduce_from_parallel_region", .inputs = {masked}, .grads = {Grad::forwarded},
                           .output_bytes = act});
      }
      Value pos = tape.record({.name = "wpe", .inputs = {positions}, .grads = {Grad::none},
                               .output_bytes = product({c.context, c.dim, e}), .saved = {positions},
                               .param_grads = product({c.context, c.dim})});
      x = tape.record({.name = "wte + wpe", .inputs = {tok, pos}, .grads = {Grad::forwarded, Grad::fresh},
                       .output_bytes = act});
    } else {
      x = tape.input(act);  // the activation received from the stage before, kept until its backward
    }
    const BlockShape shape{batch, c.context, c.dim, c.heads, tp};
    for (int64_t i = partition.first_block(share_.stage); i < partition.first_block(share_.stage + 1); ++i) {
      if (checkpointed) tape.begin_segment();
      x = record_transformer_block(tape, x, shape, format, str("h.", i));
      if (checkpointed) tape.end_segment();
    }
    if (!last) {  // the output is kept until its backward; a copy goes to the next stage, whose gradient comes back
      tape.hold(x);
      tape.record({.name = "send to the next stage", .inputs = {x}, .grads = {Grad::fresh}, .output_bytes = act});
      return tape;
    }
    x = layer_norm(tape, "ln_f", x, rows, c.dim);
    if (tp > 1) x = view(tape, "lm_head.copy_to_parallel_region", x, act, Grad::fresh);
    Value logits = keeps_input(tape, "lm_head", x, Grad::fresh, product({rows, V, e}), product({V, c.dim}));
    if (tp == 1) {
      tape.hold(cross_entropy(tape, logits, targets, rows, c.vocab, format));
      return tape;
    }
    // vocab_parallel_cross_entropy keeps each row's max and sum of exponentials (f64) and makes its
    // gradient [rows, vocab / tp] in the backward; its f64 copies of the logits are plain heap
    // memory, not the allocator's.
    tape.hold(tape.record({.name = "vocab_parallel_cross_entropy", .inputs = {logits, targets},
                           .grads = {Grad::fresh, Grad::none}, .output_bytes = 8,
                           .saved_extra_bytes = product({2, rows, 8}), .forward_scratch_bytes = product({rows, 8})}));
    return tape;
  }
  Shape shape{batch};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  Value images = tape.input(product({numel(shape), format.element}));
  Value targets = tape.input(product({batch, 8}));
  ClassifierRecorder recorder(tape, format, shape, images);
  bool in_segment = false;
  const auto& children = classifier_->named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& [child_name, child] = children[i];
    // A checkpoint segment starts at each layer with parameters and takes the parameter-free
    // layers after it (Conv2d, ReLU, MaxPool2d).
    if (checkpointed && child->num_parameters() > 0) {
      if (in_segment) tape.end_segment();
      tape.begin_segment();
      in_segment = true;
    }
    auto* conv = dynamic_cast<const nn::Conv2d*>(child.get());
    if (conv && i + 1 < children.size() && dynamic_cast<const nn::ReLU*>(children[i + 1].second.get())) {
      auto* pool = i + 2 < children.size() ? dynamic_cast<const nn::MaxPool2d*>(children[i + 2].second.get()) : nullptr;
      recorder.add_fused(child_name, *conv, pool);
      i += pool ? 2 : 1;
      continue;
    }
    recorder.add(child_name, *child);
  }
  if (in_segment) tape.end_segment();
  WEFT_CHECK(recorder.shape().size() == 2, ShapeError, "plan: ", name_, " must end in [N, classes] logits, it makes ",
             shape_str(recorder.shape()));
  // weft's trainer keeps the logits (to count correct predictions) and the loss until the step ends.
  Value logits = recorder.output();
  tape.hold(logits);
  tape.hold(cross_entropy(tape, logits, targets, batch, recorder.shape()[1], format));
  return tape;
}

}  // namespace weft::memory
