#include "weft/dist/tensor_parallel.h"

#include <algorithm>
#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/ops/arith.h"
#include "weft/ops/embedding.h"
#include "weft/ops/linear.h"

namespace weft::dist {

namespace {

using Grads = std::vector<Tensor>;

// A private contiguous copy (the collectives write in place).
Tensor private_copy(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()).copy_(t); }

int64_t share(int64_t size, const ProcessGroup& group, const char* what) {
  WEFT_CHECK(size % group.size() == 0, ValueError, "tensor parallel: ", what, " (", size,
             ") is not divisible by the group's ", group.size(), " ranks");
  return size / group.size();
}

// [..., k] on every rank -> [..., N k], the ranks' slices side by side in rank order. Not recorded.
Tensor all_gather_last(const Tensor& x, ProcessGroup& group) {
  NoGradGuard no_grad;
  const Tensor in = x.contiguous();
  const int64_t k = in.size(-1), rows = in.numel() / k, ranks = group.size();
  Tensor all = Tensor::empty({ranks * in.numel()}, in.dtype());
  group.all_gather(in.reshape({in.numel()}), all);
  Shape shape = in.shape();
  shape.back() = ranks * k;
  return all.view({ranks, rows, k}).permute({1, 0, 2}).contiguous().view(shape);
}

// This rank's [..., k] of [..., N k]. Not recorded.
Tensor own_slice_last(const Tensor& x, const ProcessGroup& group) {
  NoGradGuard no_grad;
  const int64_t k = share(x.size(-1), group, "the last dimension");
  return private_copy(x.narrow(x.dim() - 1, group.rank() * k, k));
}

// The rank's slice of a whole parameter, shaped as the rank holds it: a leaf of its own.
Tensor local_part(const Tensor& whole, const Split& split, const ProcessGroup& group) {
  return take_slice(whole, split.slice(whole.shape(), group.rank(), group.size()))
      .view(split.local_shape(whole.shape(), group.size()));
}

}  // namespace

Shape Split::local_shape(const Shape& whole, int ranks) const {
  Shape local = whole;
  WEFT_CHECK(dim < static_cast<int>(whole.size()) && whole[static_cast<size_t>(dim)] % (parts * ranks) == 0,
             ValueError, "tensor parallel: a tensor of shape ", shape_str(whole), " does not split into ", parts,
             " x ", ranks, " along dimension ", dim);
  local[static_cast<size_t>(dim)] /= ranks;
  return local;
}

Slice Split::slice(const Shape& whole, int rank, int ranks) const {
  local_shape(whole, ranks);  // checks that it splits
  if (dim == 1) {  // a block of in / N columns in each of the `out` rows
    const int64_t k = whole[1] / ranks;
    return {.begin = rank * k, .length = k, .count = whole[0], .stride = whole[1]};
  }
  const int64_t inner = weft::numel(whole) / whole[0], part_rows = whole[0] / parts, rows = part_rows / ranks;
  return {.begin = rank * rows * inner, .length = rows * inner, .count = parts, .stride = part_rows * inner};
}

Tensor take_slice(const Tensor& whole, const Slice& slice) {
  NoGradGuard no_grad;
  const Tensor flat = whole.contiguous().reshape({whole.numel()});
  Tensor out = Tensor::empty({slice.count * slice.length}, whole.dtype());
  for (int64_t i = 0; i < slice.count; ++i)
    out.narrow(0, i * slice.length, slice.length).copy_(flat.narrow(0, slice.begin + i * slice.stride, slice.length));
  return out;
}

std::map<std::string, Tensor> slice_state_dict(const std::map<std::string, Tensor>& whole,
                                               const TensorParallelLayout& layout, int rank, int ranks) {
  std::map<std::string, Tensor> out;
  for (const auto& [key, tensor] : whole) {
    // NAME itself, or an optimizer's NAME.FIELD of NAME's shape.
    auto it = layout.find(key);
    if (it == layout.end() && key.rfind('.') != std::string::npos) it = layout.find(key.substr(0, key.rfind('.')));
    if (it == layout.end() || tensor.dim() == 0) {
      out[key] = tensor;
      continue;
    }
    const ShardedParameter& p = it->second;
    WEFT_CHECK(tensor.shape() == p.whole, ShapeError, "tensor parallel: '", key, "' is ", shape_str(tensor.shape()),
               ", the whole model's is ", shape_str(p.whole));
    out[key] = take_slice(tensor, p.split.slice(p.whole, rank, ranks)).view(p.split.local_shape(p.whole, ranks));
  }
  return out;
}

Tensor copy_to_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = x.detach();
  autograd::record("copy_to_parallel_region", {x}, {out}, [&group](const Grads& g) {
    Tensor sum = private_copy(g[0]);
    group.all_reduce(sum, ReduceOp::sum);
    return Grads{sum};
  });
  return out;
}

Tensor reduce_from_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = private_copy(x);
    group.all_reduce(out, ReduceOp::sum);
  }
  autograd::record("reduce_from_parallel_region", {x}, {out}, [](const Grads& g) { return Grads{g[0]}; });
  return out;
}

Tensor scatter_to_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = own_slice_last(x, group);
  autograd::record("scatter_to_parallel_region", {x}, {out},
                   [&group](const Grads& g) { return Grads{all_gather_last(g[0], group)}; });
  return out;
}

Tensor gather_from_parallel_region(const Tensor& x, ProcessGroup& group) {
  Tensor out = all_gather_last(x, group);
  autograd::record("gather_from_parallel_region", {x}, {out},
                   [&group](const Grads& g) { return Grads{own_slice_last(g[0], group)}; });
  return out;
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, ProcessGroup& group,
                                    Reduction reduction) {
  WEFT_CHECK(reduction != Reduction::none, ValueError, "vocab_parallel_cross_entropy: reduction must be mean or sum");
  WEFT_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError,
             "vocab_parallel_cross_entropy: expected logits [rows, vocab / ranks] and targets [rows], got ",
             shape_str(logits.shape()), " and ", shape_str(targets.shape()));
  WEFT_CHECK(targets.dtype() == DType::i64, DTypeError, "vocab_parallel_cross_entropy: targets must be i64, got ",
             dtype_name(targets.dtype()));
  WEFT_CHECK(is_floating(logits.dtype()), DTypeError, "vocab_parallel_cross_entropy: logits must be floating, got ",
             dtype_name(logits.dtype()));
  const int64_t rows = logits.size(0), width = logits.size(1), start = group.rank() * width;
  const int64_t vocab = width * group.size();
  const std::vector<double> x = logits.to_vector<double>();
  const std::vector<int64_t> t = targets.contiguous().to_vector<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    WEFT_CHECK(t[i] >= 0 && t[i] < vocab, IndexError, "vocab_parallel_cross_entropy: target ", t[i], " of row ", i,
               " is outside the vocabulary of ", vocab);
  Tensor maxes = Tensor::empty({rows}, DType::f64), sums = Tensor::zeros({rows}, DType::f64);
  Tensor picked = Tensor::zeros({rows}, DType::f64);
  double* m = maxes.data<double>();
  for (int64_t i = 0; i < rows; ++i) m[i] = *std::max_element(x.begin() + i * width, x.begin() + (i + 1) * width);
  group.all_reduce(maxes, ReduceOp::max);
  double *s = sums.data<double>(), *p = picked.data<double>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < width; ++j) s[i] += std::exp(x[i * width + j] - m[i]);
    if (t[i] >= start && t[i] < start + width) p[i] = x[i * width + t[i] - start];
  }
  group.all_reduce(sums, ReduceOp::sum);
  group.all_reduce(picked, ReduceOp::sum);
  double loss = 0;
  for (int64_t i = 0; i < rows; ++i) loss += std::log(s[i]) + m[i] - p[i];
  const double divisor = reduction == Reduction::mean ? static_cast<double>(rows) : 1.0;
  Tensor out = Tensor::scalar(loss / divisor, logits.dtype());
  autograd::record("vocab_parallel_cross_entropy", {logits}, {out},
                   [x, t, maxes, sums, rows, width, start, divisor, dtype = logits.dtype()](const Grads& g) {
                     const double factor = g[0].item() / divisor;
                     const double *m = maxes.data<double>(), *s = sums.data<double>();
                     std::vector<double> grad(x.size());
                     for (int64_t i = 0; i < rows; ++i)
                       for (int64_t j = 0; j < width; ++j)
                         grad[i * width + j] =
                             (std::exp(x[i * width + j] - m[i]) / s[i] - (t[i] == start + j ? 1.0 : 0.0)) * factor;
                     return Grads{Tensor::from_vector(grad, {rows, width}, dtype)};
                   });
  return out;
}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool gather_output,
                                           int64_t parts)
    : Module("ColumnParallelLinear"), group_(group), gather_output_(gather_output) {
  share(whole.out_features / parts, group, "out_features");
  weight = register_parameter("weight", local_part(whole.weight, {.dim = 0, .parts = parts}, group));
  if (whole.bias.defined()) bias = register_parameter("bias", local_part(whole.bias, {.dim = 0, .parts = parts}, group));
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor y = linear(copy_to_parallel_region(x, group_), weight, bias);
  return gather_output_ ? gather_from_parallel_region(y, group_) : y;
}

RowParallelLinear::RowParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool input_is_parallel)
    : Module("RowParallelLinear"), group_(group), input_is_parallel_(input_is_parallel) {
  NoGradGuard no_grad;
  share(whole.in_features, group, "in_features");
  weight = register_parameter("weight", local_part(whole.weight, {.dim = 1}, group));
  if (whole.bias.defined()) bias = register_parameter("bias", private_copy(whole.bias));
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor mine = input_is_parallel_ ? x : scatter_to_parallel_region(x, group_);
  Tensor y = reduce_from_parallel_region(linear(mine, weight), group_);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace weft::dist

namespace weft::dist {

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& whole, ProcessGroup& group)
    : nn::Embedding("VocabParallelEmbedding", local_part(whole.weight, {.dim = 0}, group)),
      first(group.rank() * whole.num_embeddings / group.size()), vocab(whole.num_embeddings), group_(group) {}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  WEFT_CHECK(ids.dtype() == DType::i64, DTypeError, "VocabParallelEmbedding: ids must be i64, got ",
             dtype_name(ids.dtype()));
  // Ids outside the rank's rows look up row 0 and are zeroed by the mask: their gradient is zero.
  std::vector<int64_t> local = ids.contiguous().to_vector<int64_t>();
  std::vector<double> mine(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    WEFT_CHECK(local[i] >= 0 && local[i] < vocab, IndexError, "VocabParallelEmbedding: id ", local[i],
               " is outside the vocabulary of ", vocab);
    mine[i] = local[i] >= first && local[i] < first + num_embeddings;
    local[i] = mine[i] != 0 ? local[i] - first : 0;
  }
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  const Tensor rows = embedding(Tensor::from_vector(local, ids.shape()), weight);
  return reduce_from_parallel_region(mul(rows, Tensor::from_vector(mine, mask_shape, weight.dtype())), group_);
}

VocabParallelEmbedding::VocabParallelEmbedding(Tensor rows, int64_t first_id, int64_t vocab_size, ProcessGroup& group)
    : nn::Embedding("VocabParallelEmbedding", std::move(rows)), first(first_id), vocab(vocab_size), group_(group) {}

Tensor VocabParallelEmbedding::attend(const Tensor& x) { return linear(copy_to_parallel_region(x, group_), weight, Tensor()); }

std::shared_ptr<nn::Embedding> VocabParallelEmbedding::with_copied_table() const {
  NoGradGuard no_grad;
  return std::shared_ptr<nn::Embedding>(new VocabParallelEmbedding(weight.clone(), first, vocab, group_));
}

namespace {

// The module at `name` of `parent` as the Linear it was built as.
const nn::Linear& linear_at(nn::Module& parent, const std::string& name) {
  const auto* l = dynamic_cast<const nn::Linear*>(&parent.get_submodule(name));
  WEFT_CHECK(l != nullptr, ValueError, "tensor parallel: expected a Linear at ", name, ", found a ",
             parent.get_submodule(name).name());
  return *l;
}

}  // namespace

TensorParallelLayout parallelize_gpt(nn::GPT& model, ProcessGroup& group) {
  const nn::GPTConfig& c = model.config;
  const int ranks = group.size();
  WEFT_CHECK(c.heads % ranks == 0, ValueError, "--tp ", ranks, ": the GPT's ", c.heads,
             " attention heads do not split evenly over ", ranks, " ranks (--heads must be a multiple of --tp)");
  WEFT_CHECK(c.vocab % ranks == 0, ValueError, "--tp ", ranks, ": the GPT's vocabulary of ", c.vocab,
             " does not split evenly over ", ranks, " ranks (--vocab must be a multiple of --tp)");
  TensorParallelLayout layout;
  auto note = [&](const std::string& name, const Tensor& whole, Split split) {
    layout[name] = {.whole = whole.shape(), .split = split};
  };
  for (size_t i = 0; i < model.h->size(); ++i) {
    const std::string block = str("h.", i, ".");
    nn::Module& attn = model.get_submodule(block + "attn");
    nn::Module& mlp = model.get_submodule(block + "mlp");
    const nn::Linear &qkv = linear_at(attn, "c_attn"), &attn_out = linear_at(attn, "c_proj");
    const nn::Linear &fc = linear_at(mlp, "c_fc"), &mlp_out = linear_at(mlp, "c_proj");
    note(block + "attn.c_attn.weight", qkv.weight, {.dim = 0, .parts = 3});
    if (qkv.bias.defined()) note(block + "attn.c_attn.bias", qkv.bias, {.dim = 0, .parts = 3});
    note(block + "attn.c_proj.weight", attn_out.weight, {.dim = 1});
    note(block + "mlp.c_fc.weight", fc.weight, {.dim = 0});
    if (fc.bias.defined()) note(block + "mlp.c_fc.bias", fc.bias, {.dim = 0});
    note(block + "mlp.c_proj.weight", mlp_out.weight, {.dim = 1});
    attn.replace_module("c_attn", std::make_shared<ColumnParallelLinear>(qkv, group, false, /*parts=*/3));
    attn.replace_module("c_proj", std::make_shared<RowParallelLinear>(attn_out, group, true));
    mlp.replace_module("c_fc", std::make_shared<ColumnParallelLinear>(fc, group, false));
    mlp.replace_module("c_proj", std::make_shared<RowParallelLinear>(mlp_out, group, true));
  }
  note("wte.weight", model.wte->weight, {.dim = 0});
  model.replace_module("wte", std::make_shared<VocabParallelEmbedding>(*model.wte, group));
  return layout;
}

}  // namespace weft::dist
