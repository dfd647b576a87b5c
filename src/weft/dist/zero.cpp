#include "weft/dist/zero.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/optim/clip.h"

namespace weft::dist {

namespace {

constexpr int64_t kAlign = 16;  // elements: each parameter and each shard starts on a whole vector

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Stage 3's layers: the children with parameters of the outermost Sequentials, in forward order.
void find_layers(nn::Module& module, std::vector<nn::Module*>& layers) {
  for (auto& [name, child] : module.named_children()) {
    if (module.name() == "Sequential") {
      if (child->num_parameters() > 0) layers.push_back(child.get());
    } else {
      find_layers(*child, layers);
    }
  }
}

// Makes `param` a view of `storage` at element `offset`, as Module::to re-points a converted one.
void point_into(const Tensor& param, const Storage& storage, int64_t offset) {
  TensorImpl* impl = param.impl();
  impl->storage = storage;
  impl->offset = offset;
  impl->strides = contiguous_strides(impl->shape);
}

}  // namespace

ZeroDataParallel::ZeroDataParallel(nn::Module& model, ProcessGroup& group, ZeroOptions options)
    : group_(group), options_(options), params_(model.parameters()) {
  WEFT_CHECK(options_.stage >= 1 && options_.stage <= 3, ValueError, "ZeRO: stage must be 1, 2 or 3, got ",
             options_.stage);
  NoGradGuard no_grad;
  for (auto& [name, buffer] : model.named_buffers()) group_.broadcast(buffer, 0);
  lay_out(model);
  copied_.assign(params_.size(), false);
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_grad_ready_hook([this, k](const Tensor&) { gradient_ready(k); }));
  if (options_.stage == 3) add_layer_hooks(model);
}

ZeroDataParallel::~ZeroDataParallel() {
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (const Error&) {  // a failed reduction was reported by finish_backward already
    }
  }
  for (RemovableHandle& hook : hooks_) hook.remove();
}

Tensor ZeroDataParallel::flat(const Bucket& b) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = b.storage;
  impl->shape = {b.numel};
  impl->strides = {1};
  impl->dtype = b.dtype;
  return Tensor(std::move(impl));
}

void ZeroDataParallel::lay_out(nn::Module& model) {
  const int ranks = group_.size(), rank = group_.rank();
  std::vector<std::vector<size_t>> members;
  if (options_.stage < 3) {
    members = reverse_order_buckets(params_, options_.bucket_bytes);
  } else {
    // One bucket per layer, the last layer first (backward's order), then the parameters in none.
    std::map<const TensorImpl*, size_t> index_of;
    for (size_t k = 0; k < params_.size(); ++k) index_of[params_[k].impl()] = k;
    std::vector<nn::Module*> layers;
    find_layers(model, layers);
    std::vector<bool> placed(params_.size(), false);
    for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
      std::vector<size_t>& m = members.emplace_back();
      for (const Tensor& p : (*layer)->parameters()) {
        const size_t k = index_of.at(p.impl());
        if (!placed[k]) m.push_back(k);
        placed[k] = true;
      }
      if (m.empty()) members.pop_back();
    }
    std::vector<size_t>& rest = members.emplace_back();
    for (size_t k = 0; k < params_.size(); ++k)
      if (!placed[k]) rest.push_back(k);
    if (rest.empty()) members.pop_back();
  }
  bucket_of_.resize(params_.size());
  for (const std::vector<size_t>& m : members) {
    Bucket& b = buckets_.emplace_back();
    b.dtype = params_[m.front()].dtype();
    for (size_t k : m) {
      WEFT_CHECK(params_[k].dtype() == b.dtype, DTypeError, "ZeRO: parameters of one layer in different dtypes (",
                 dtype_name(b.dtype), ", ", dtype_name(params_[k].dtype()), ")");
      b.params.push_back(k);
      b.offsets.push_back(b.numel);
      b.numel += round_up(params_[k].numel(), kAlign);
      bucket_of_[k] = buckets_.size() - 1;
    }
    b.numel = round_up(b.numel, kAlign * ranks);
  }
  // Each bucket's parameters copied into its flat buffer (rank 0's everywhere), the parameters
  // made views of it, and the rank's shard cut; stage 3 then keeps the shard only.
  for (Bucket& b : buckets_) {
    Tensor whole = Tensor::zeros({b.numel}, b.dtype);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const Tensor& p = params_[b.params[slot]];
      whole.narrow(0, b.offsets[slot], p.numel()).copy_(p.reshape({p.numel()}));
    }
    group_.broadcast(whole, 0);
    b.storage = whole.storage();
    for (size_t slot = 0; slot < b.params.size(); ++slot) point_into(params_[b.params[slot]], b.storage, b.offsets[slot]);
    const int64_t n = shard_numel(b);
    if (options_.stage < 3) {
      shards_.push_back(whole.narrow(0, rank * n, n));
    } else {
      shards_.push_back(Tensor::empty({n}, b.dtype).copy_(whole.narrow(0, rank * n, n)));
      b.storage.resize_(0);
    }
    if (options_.stage == 1) b.grad_flat = Tensor::zeros({b.numel}, b.dtype);
  }
}

void ZeroDataParallel::add_layer_hooks(nn::Module& model) {
  std::vector<nn::Module*> layers;
  find_layers(model, layers);
  // Buckets are the layers in reverse order, then (when there is one) the rest.
  const size_t rest = layers.size() < buckets_.size() ? buckets_.size() - 1 : buckets_.size();
  for (size_t i = 0; i < layers.size(); ++i) {
    const size_t k = layers.size() - 1 - i;
    hooks_.push_back(layers[i]->register_forward_pre_hook([this, k](nn::Module&, const Tensor&) -> std::optional<Tensor> {
      gather(k);
      return std::nullopt;
    }));
    hooks_.push_back(layers[i]->register_forward_hook(
        [this, k](nn::Module&, const Tensor&, const Tensor& output) -> std::optional<Tensor> {
          release(k);
          if (!is_grad_enabled() || !output.requires_grad()) return std::nullopt;
          // Backward reaches this layer through here first: gather its parameters again.
          Tensor through = output.detach();
          autograd::record("zero3_gather", {output}, {through}, [this, k](const std::vector<Tensor>& g) {
            gather(k);
            return std::vector<Tensor>{g[0]};
          });
          return through;
        }));
  }
  if (rest == buckets_.size()) return;
  // The parameters in no layer stay gathered from the model's forward until their gradients are in
  // (or, when nothing is recorded, until the forward ends).
  hooks_.push_back(model.register_forward_pre_hook([this, rest](nn::Module&, const Tensor&) -> std::optional<Tensor> {
    gather(rest);
    return std::nullopt;
  }));
  hooks_.push_back(model.register_forward_hook([this, rest](nn::Module&, const Tensor&, const Tensor& output) -> std::optional<Tensor> {
    if (!is_grad_enabled() || !output.requires_grad()) release(rest);
    return std::nullopt;
  }));
}

void ZeroDataParallel::gather(size_t k) {
  Bucket& b = buckets_[k];
  if (b.gathered++ > 0) return;
  NoGradGuard no_grad;
  b.storage.resize_(static_cast<size_t>(b.numel) * dtype_size(b.dtype));
  Tensor whole = flat(b);
  group_.all_gather(shards_[k], whole);
}

void ZeroDataParallel::release(size_t k) {
  Bucket& b = buckets_[k];
  if (b.gathered == 0 || --b.gathered > 0) return;
  b.storage.resize_(0);
}

std::vector<Tensor> ZeroDataParallel::shard(const std::vector<Tensor>& per_param, DType dtype) const {
  WEFT_CHECK(per_param.size() == params_.size(), ValueError, "ZeRO: ", per_param.size(), " tensors for ",
             params_.size(), " parameters");
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Bucket& b : buckets_) {
    const int64_t n = shard_numel(b), begin = group_.rank() * n;
    Tensor piece = Tensor::zeros({n}, dtype);
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const Tensor& t = per_param[b.params[slot]];
      const Tensor& p = params_[b.params[slot]];
      WEFT_CHECK(t.defined() && t.shape() == p.shape(), ShapeError, "ZeRO: tensor for parameter ", b.params[slot],
                 " must have its shape ", shape_str(p.shape()), ", got ",
                 t.defined() ? shape_str(t.shape()) : std::string("none"));
      // The part of [offset, offset + numel) that falls in [begin, begin + n).
      const int64_t lo = std::max(begin, b.offsets[slot]), hi = std::min(begin + n, b.offsets[slot] + p.numel());
      if (lo < hi) piece.narrow(0, lo - begin, hi - lo).copy_(t.reshape({t.numel()}).narrow(0, lo - b.offsets[slot], hi - lo));
    }
    out.push_back(piece);
  }
  return out;
}

void ZeroDataParallel::prepare_backward(bool last_micro_batch) {
  // Stage 1 keeps whole gradients, so only the step's last micro-batch need be reduced; 2 and 3
  // keep none, so every micro-batch's are.
  armed_ = last_micro_batch || options_.stage > 1;
  if (!armed_) return;
  for (Bucket& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  std::fill(copied_.begin(), copied_.end(), false);
  next_to_issue_ = 0;
}

void ZeroDataParallel::gradient_ready(size_t k) {
  if (!armed_ || copied_[k]) return;
  const Tensor& p = params_[k];
  if (!p.grad().defined()) return;
  Bucket& b = buckets_[bucket_of_[k]];
  NoGradGuard no_grad;
  if (!b.grad_flat.defined()) b.grad_flat = Tensor::zeros({b.numel}, b.dtype);
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), k) - b.params.begin());
  b.grad_flat.narrow(0, b.offsets[slot], p.numel()).copy_(p.grad().reshape({p.numel()}));
  p.set_grad(Tensor());
  copied_[k] = true;
  if (--b.pending == 0 && options_.stage == 3) release(bucket_of_[k]);
  if (options_.overlap) issue_ready_buckets();
}

void ZeroDataParallel::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() && buckets_[next_to_issue_].pending == 0) {
    Bucket& b = buckets_[next_to_issue_++];
    if (options_.stage == 1) {
      b.work = group_.all_reduce_async(b.grad_flat, ReduceOp::avg);
    } else {
      b.reduced = Tensor::empty({shard_numel(b)}, b.dtype);
      b.work = group_.reduce_scatter_async(b.grad_flat, b.reduced, ReduceOp::avg);
    }
  }
}

void ZeroDataParallel::finish_backward() {
  if (!armed_) return;
  armed_ = false;
  NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      if (copied_[b.params[slot]]) continue;
      if (!b.grad_flat.defined()) b.grad_flat = Tensor::zeros({b.numel}, b.dtype);
      b.grad_flat.narrow(0, b.offsets[slot], params_[b.params[slot]].numel()).zero_();
      if (--b.pending == 0 && options_.stage == 3) release(k);
    }
  }
  issue_ready_buckets();
  const int64_t rank = group_.rank();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    b.work.wait();
    const Tensor& shard = shards_[k];
    if (options_.stage == 1) {
      shard.set_grad(b.grad_flat.narrow(0, rank * shard_numel(b), shard_numel(b)));
      continue;
    }
    b.grad_flat = Tensor();
    if (!shard.grad().defined()) {
      shard.set_grad(b.reduced);
    } else {
      Tensor sum = shard.grad();
      cpu::add_(sum, b.reduced);
    }
    b.reduced = Tensor();
  }
}

void ZeroDataParallel::abandon_pass() {
  WEFT_CHECK(options_.stage == 1, ValueError, "ZeRO-", options_.stage,
             ": a pass that failed on one rank cannot be abandoned (--auto-batch works with ddp and zero1)");
  if (!armed_) prepare_backward(true);
  finish_backward();
}

bool ZeroDataParallel::on_any_rank(bool flag) { return group_.any(flag); }

void ZeroDataParallel::finish_step() {
  if (options_.stage == 3) return;
  NoGradGuard no_grad;
  std::vector<Tensor> wholes;
  std::vector<Work> works;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    wholes.push_back(flat(buckets_[k]));
    works.push_back(group_.all_gather_async(shards_[k], wholes.back()));
  }
  for (Work& w : works) w.wait();
}

void ZeroDataParallel::reduce_gradients() {
  WEFT_CHECK(options_.stage == 1, ValueError, "ZeRO-", options_.stage, ": reduces gradients during backward only");
  prepare_backward(true);
  for (size_t k = params_.size(); k-- > 0;) gradient_ready(k);  // the buckets' order: the last parameters first
  finish_backward();
}

std::vector<double> ZeroDataParallel::grad_squares() const {
  std::vector<double> squares(params_.size(), 0.0);
  for (const Piece& piece : pieces(group_.rank())) {
    const Tensor& shard = shards_[bucket_of_[piece.param]];
    if (!shard.grad().defined()) continue;
    const double norm = optim::tensors_norm({shard.grad().narrow(0, offset_in_shard(piece), piece.length)});
    squares[piece.param] = norm * norm;
  }
  return squares;
}

double ZeroDataParallel::grad_norm() const {
  std::vector<Tensor> grads;
  for (const Tensor& s : shards_)
    if (s.grad().defined()) grads.push_back(s);
  const double local = grads.empty() ? 0 : optim::grad_norm(grads);
  Tensor squares = Tensor::scalar(local * local, DType::f64);
  group_.all_reduce(squares, ReduceOp::sum);
  return std::sqrt(squares.item());
}

void ZeroDataParallel::gather_parameters() {
  if (options_.stage < 3) return;
  for (size_t k = 0; k < buckets_.size(); ++k) gather(k);
}

void ZeroDataParallel::release_parameters() {
  if (options_.stage < 3) return;
  NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const int64_t n = shard_numel(buckets_[k]);
    Tensor(shards_[k]).copy_(flat(buckets_[k]).narrow(0, group_.rank() * n, n));
    release(k);
  }
}

std::vector<ZeroDataParallel::Piece> ZeroDataParallel::pieces(int rank) const {
  std::vector<Piece> out;
  for (const Bucket& b : buckets_) {
    const int64_t n = shard_numel(b), begin = rank * n;
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const int64_t lo = std::max(begin, b.offsets[slot]);
      const int64_t hi = std::min(begin + n, b.offsets[slot] + params_[b.params[slot]].numel());
      if (lo < hi) out.push_back({b.params[slot], lo - b.offsets[slot], hi - lo});
    }
  }
  return out;
}

int64_t ZeroDataParallel::offset_in_shard(const Piece& piece) const {
  const Bucket& b = buckets_[bucket_of_[piece.param]];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), piece.param) - b.params.begin());
  return b.offsets[slot] + piece.begin - group_.rank() * shard_numel(b);
}

std::map<std::string, Tensor> ZeroDataParallel::local_state(const optim::Optimizer& optimizer,
                                                            const std::vector<std::string>& param_names) const {
  WEFT_CHECK(param_names.size() == params_.size(), ValueError, "ZeRO: ", param_names.size(), " names for ",
             params_.size(), " parameters");
  NoGradGuard no_grad;
  std::map<std::string, Tensor> out;
  for (const Piece& piece : pieces(group_.rank())) {
    const size_t k = bucket_of_[piece.param];
    const int64_t at = offset_in_shard(piece);
    const std::string& name = param_names[piece.param];
    out[name] = shards_[k].narrow(0, at, piece.length).clone();
    if (optimizer.step_count(k) == 0) continue;
    out[name + ".step"] = Tensor::scalar(static_cast<double>(optimizer.step_count(k)), DType::i64);
    for (const auto& [field, buffer] : optimizer.state(k)) out[name + "." + field] = buffer.narrow(0, at, piece.length).clone();
  }
  return out;
}

std::map<std::string, Tensor> ZeroDataParallel::gather_state(const optim::Optimizer& optimizer,
                                                             const std::vector<std::string>& param_names) const {
  WEFT_CHECK(param_names.size() == params_.size(), ValueError, "ZeRO: ", param_names.size(), " names for ",
             params_.size(), " parameters");
  NoGradGuard no_grad;
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    const int64_t step = optimizer.step_count(k);
    if (step == 0) continue;
    for (const auto& [field, shard] : optimizer.state(k)) {
      Tensor whole = Tensor::empty({b.numel}, shard.dtype());
      group_.all_gather(shard, whole);
      for (size_t slot = 0; slot < b.params.size(); ++slot) {
        const Tensor& p = params_[b.params[slot]];
        out[param_names[b.params[slot]] + "." + field] = whole.narrow(0, b.offsets[slot], p.numel()).reshape(p.shape()).clone();
      }
    }
    for (size_t index : b.params)
      out[param_names[index] + ".step"] = Tensor::scalar(static_cast<double>(step), DType::i64);
  }
  return out;
}

void ZeroDataParallel::load_full_state_dict(optim::Optimizer& optimizer, const std::map<std::string, Tensor>& dict,
                                            const std::vector<std::string>& param_names) const {
  WEFT_CHECK(param_names.size() == params_.size(), ValueError, "ZeRO: ", param_names.size(), " names for ",
             params_.size(), " parameters");
  const std::set<std::string> known(param_names.begin(), param_names.end());
  for (const auto& [key, value] : dict) {
    const size_t dot = key.rfind('.');
    WEFT_CHECK(dot != std::string::npos && known.contains(key.substr(0, dot)), ValueError, optimizer.name(),
               ": load_state_dict: state for '", key, "', but the model has no parameter of that name");
  }
  std::vector<std::string> buffer_names;
  for (const auto& [key, value] : dict) {
    const std::string field = key.substr(key.rfind('.') + 1);
    if (field != "step" && std::find(buffer_names.begin(), buffer_names.end(), field) == buffer_names.end())
      buffer_names.push_back(field);
  }
  // Per bucket: the step every parameter of it must share, then its shard of each buffer.
  std::vector<int64_t> steps;
  for (const Bucket& b : buckets_) {
    std::set<int64_t> seen;
    for (size_t index : b.params) {
      auto it = dict.find(param_names[index] + ".step");
      seen.insert(it == dict.end() ? 0 : static_cast<int64_t>(it->second.item()));
    }
    WEFT_CHECK(seen.size() == 1, ValueError, optimizer.name(), ": load_state_dict: the parameters sharded together "
               "(from '", param_names[b.params.front()], "') are at different steps; ZeRO steps them together");
    steps.push_back(*seen.begin());
  }
  std::vector<optim::NamedTensors> buffers(buckets_.size());
  for (const std::string& field : buffer_names) {
    std::vector<Tensor> per_param;
    for (size_t index = 0; index < params_.size(); ++index) {
      auto it = dict.find(param_names[index] + "." + field);
      per_param.push_back(it != dict.end() ? it->second : Tensor::zeros(params_[index].shape()));
    }
    DType dtype = DType::f32;
    for (const auto& [key, value] : dict)
      if (key.ends_with("." + field)) dtype = value.dtype();
    std::vector<Tensor> shards = shard(per_param, dtype);
    for (size_t k = 0; k < buckets_.size(); ++k)
      if (steps[k] > 0) buffers[k].emplace_back(field, shards[k]);
  }
  for (size_t k = 0; k < buckets_.size(); ++k) optimizer.set_state(k, steps[k], buffers[k]);
}

}  // namespace weft::dist
