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

// The parameters' indices per bucket: stages 1 and 2 as DDP's; stage 3 one bucket per layer, the
// last layer first (backward's order), then the parameters in none.
std::vector<std::vector<size_t>> zero_buckets(nn::Module& model, const std::vector<Tensor>& params,
                                              const ZeroOptions& options) {
  WEFT_CHECK(options.stage >= 1 && options.stage <= 3, ValueError, "ZeRO: stage must be 1, 2 or 3, got ",
             options.stage);
  if (options.stage < 3) return reverse_order_buckets(params, options.bucket_bytes);
  std::vector<std::vector<size_t>> members;
  std::map<const TensorImpl*, size_t> index_of;
  for (size_t k = 0; k < params.size(); ++k) index_of[params[k].impl()] = k;
  std::vector<nn::Module*> layers;
  find_layers(model, layers);
  std::vector<bool> placed(params.size(), false);
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
  for (size_t k = 0; k < params.size(); ++k)
    if (!placed[k]) rest.push_back(k);
  if (rest.empty()) members.pop_back();
  for (const std::vector<size_t>& m : members)
    for (size_t k : m)
      WEFT_CHECK(params[k].dtype() == params[m.front()].dtype(), DTypeError,
                 "ZeRO: parameters of one layer in different dtypes (", dtype_name(params[m.front()].dtype()), ", ",
                 dtype_name(params[k].dtype()), ")");
  return members;
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
    : group_(group),
      options_(options),
      params_(model.parameters()),
      buckets_(params_, zero_buckets(model, params_, options), group,
               {.collective = options.stage == 1 ? BucketCollective::all_reduce : BucketCollective::reduce_scatter,
                .overlap = options.overlap,
                .drop_gradients = true,
                .align = kAlign,
                .pad_to = kAlign * group.size(),
                // Stage 1 reduces once a step and keeps its buffers; 2 and 3 hold one only while reduced.
                .keep_buffers = options.stage == 1,
                // Stage 3 frees a layer's gathered parameters once its gradients are in.
                .filled = options.stage == 3 ? std::function<void(size_t)>([this](size_t k) { release(k); })
                                             : std::function<void(size_t)>()}) {
  NoGradGuard no_grad;
  for (auto& [name, buffer] : model.named_buffers()) group_.broadcast(buffer, 0);
  lay_out();
  if (options_.stage == 3) add_layer_hooks(model);
}

ZeroDataParallel::~ZeroDataParallel() {
  for (RemovableHandle& hook : hooks_) hook.remove();
}

Tensor ZeroDataParallel::flat(size_t bucket) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = flat_params_[bucket].storage;
  impl->shape = {buckets_.numel(bucket)};
  impl->strides = {1};
  impl->dtype = buckets_.dtype(bucket);
  return Tensor(std::move(impl));
}

void ZeroDataParallel::lay_out() {
  const int rank = group_.rank();
  // Each bucket's parameters copied into its flat buffer (rank 0's everywhere), the parameters
  // made views of it, and the rank's shard cut; stage 3 then keeps the shard only.
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Tensor whole = Tensor::zeros({buckets_.numel(k)}, buckets_.dtype(k));
    for (size_t param : buckets_.params(k)) {
      const Tensor& p = params_[param];
      whole.narrow(0, buckets_.offset(param), p.numel()).copy_(p.reshape({p.numel()}));
    }
    group_.broadcast(whole, 0);
    const Storage& storage = flat_params_.emplace_back(FlatParameters{.storage = whole.storage()}).storage;
    for (size_t param : buckets_.params(k)) point_into(params_[param], storage, buckets_.offset(param));
    const int64_t n = shard_numel(k);
    if (options_.stage < 3) {
      shards_.push_back(whole.narrow(0, rank * n, n));
    } else {
      shards_.push_back(Tensor::empty({n}, buckets_.dtype(k)).copy_(whole.narrow(0, rank * n, n)));
      flat_params_.back().storage.resize_(0);
    }
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
  FlatParameters& f = flat_params_[k];
  if (f.gathered++ > 0) return;
  NoGradGuard no_grad;
  f.storage.resize_(static_cast<size_t>(buckets_.numel(k)) * dtype_size(buckets_.dtype(k)));
  Tensor whole = flat(k);
  group_.all_gather(shards_[k], whole);
}

void ZeroDataParallel::release(size_t k) {
  FlatParameters& f = flat_params_[k];
  if (f.gathered == 0 || --f.gathered > 0) return;
  f.storage.resize_(0);
}

std::vector<Tensor> ZeroDataParallel::shard(const std::vector<Tensor>& per_param, DType dtype) const {
  WEFT_CHECK(per_param.size() == params_.size(), ValueError, "ZeRO: ", per_param.size(), " tensors for ",
             params_.size(), " parameters");
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const int64_t n = shard_numel(k), begin = group_.rank() * n;
    Tensor piece = Tensor::zeros({n}, dtype);
    for (size_t param : buckets_.params(k)) {
      const Tensor& t = per_param[param];
      const Tensor& p = params_[param];
      WEFT_CHECK(t.defined() && t.shape() == p.shape(), ShapeError, "ZeRO: tensor for parameter ", param,
                 " must have its shape ", shape_str(p.shape()), ", got ",
                 t.defined() ? shape_str(t.shape()) : std::string("none"));
      // The part of [offset, offset + numel) that falls in [begin, begin + n).
      const int64_t offset = buckets_.offset(param);
      const int64_t lo = std::max(begin, offset), hi = std::min(begin + n, offset + p.numel());
      if (lo < hi) piece.narrow(0, lo - begin, hi - lo).copy_(t.reshape({t.numel()}).narrow(0, lo - offset, hi - lo));
    }
    out.push_back(piece);
  }
  return out;
}

void ZeroDataParallel::prepare_backward(bool last_micro_batch) {
  // Stage 1 keeps whole gradients, so only the step's last micro-batch need be reduced; 2 and 3
  // keep none, so every micro-batch's are.
  if (last_micro_batch || options_.stage > 1) buckets_.arm();
}

void ZeroDataParallel::take_bucket(size_t k, const Tensor& reduced) {
  const Tensor& shard = shards_[k];
  if (options_.stage == 1) {
    shard.set_grad(reduced.narrow(0, group_.rank() * shard_numel(k), shard_numel(k)));
  } else if (!shard.grad().defined()) {
    shard.set_grad(reduced);
  } else {
    Tensor sum = shard.grad();
    cpu::add_(sum, reduced);
  }
}

void ZeroDataParallel::finish_backward() {
  if (!buckets_.armed()) return;
  buckets_.finish([this](size_t k, const Tensor& reduced) { take_bucket(k, reduced); });
}

void ZeroDataParallel::abandon_pass() {
  WEFT_CHECK(options_.stage == 1, ValueError, "ZeRO-", options_.stage,
             ": a pass that failed on one rank cannot be abandoned (--auto-batch works with ddp and zero1)");
  if (!buckets_.armed()) prepare_backward(true);
  finish_backward();
}

bool ZeroDataParallel::on_any_rank(bool flag) { return group_.any(flag); }

void ZeroDataParallel::finish_step() {
  if (options_.stage == 3) return;
  NoGradGuard no_grad;
  std::vector<Tensor> wholes;
  std::vector<Work> works;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    wholes.push_back(flat(k));
    works.push_back(group_.all_gather_async(shards_[k], wholes.back()));
  }
  for (Work& w : works) w.wait();
}

void ZeroDataParallel::reduce_gradients() {
  WEFT_CHECK(options_.stage == 1, ValueError, "ZeRO-", options_.stage, ": reduces gradients during backward only");
  buckets_.reduce_gradients([this](size_t k, const Tensor& reduced) { take_bucket(k, reduced); });
}

std::vector<double> ZeroDataParallel::grad_squares() const {
  std::vector<double> squares(params_.size(), 0.0);
  for (const Piece& piece : pieces(group_.rank())) {
    const Tensor& shard = shards_[buckets_.bucket_of(piece.param)];
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
    const int64_t n = shard_numel(k);
    Tensor(shards_[k]).copy_(flat(k).narrow(0, group_.rank() * n, n));
    release(k);
  }
}

std::vector<ZeroDataParallel::Piece> ZeroDataParallel::pieces(int rank) const {
  std::vector<Piece> out;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const int64_t n = shard_numel(k), begin = rank * n;
    for (size_t param : buckets_.params(k)) {
      const int64_t offset = buckets_.offset(param);
      const int64_t lo = std::max(begin, offset), hi = std::min(begin + n, offset + params_[param].numel());
      if (lo < hi) out.push_back({param, lo - offset, hi - lo});
    }
  }
  return out;
}

int64_t ZeroDataParallel::offset_in_shard(const Piece& piece) const {
  return buckets_.offset(piece.param) + piece.begin - group_.rank() * shard_numel(buckets_.bucket_of(piece.param));
}

std::map<std::string, Tensor> ZeroDataParallel::local_state(const optim::Optimizer& optimizer,
                                                            const std::vector<std::string>& param_names) const {
  WEFT_CHECK(param_names.size() == params_.size(), ValueError, "ZeRO: ", param_names.size(), " names for ",
             params_.size(), " parameters");
  NoGradGuard no_grad;
  std::map<std::string, Tensor> out;
  for (const Piece& piece : pieces(group_.rank())) {
    const size_t k = buckets_.bucket_of(piece.param);
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
    const int64_t step = optimizer.step_count(k);
    if (step == 0) continue;
    for (const auto& [field, shard] : optimizer.state(k)) {
      Tensor whole = Tensor::empty({buckets_.numel(k)}, shard.dtype());
      group_.all_gather(shard, whole);
      for (size_t param : buckets_.params(k)) {
        const Tensor& p = params_[param];
        out[param_names[param] + "." + field] = whole.narrow(0, buckets_.offset(param), p.numel()).reshape(p.shape()).clone();
      }
    }
    for (size_t index : buckets_.params(k))
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
  for (size_t k = 0; k < buckets_.size(); ++k) {
    std::set<int64_t> seen;
    for (size_t index : buckets_.params(k)) {
      auto it = dict.find(param_names[index] + ".step");
      seen.insert(it == dict.end() ? 0 : static_cast<int64_t>(it->second.item()));
    }
    WEFT_CHECK(seen.size() == 1, ValueError, optimizer.name(), ": load_state_dict: the parameters sharded together "
               "(from '", param_names[buckets_.params(k).front()], "') are at different steps; ZeRO steps them together");
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
