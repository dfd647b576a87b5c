#include "weft/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_set>
#include <utility>

#include <omp.h>

#include "weft/autograd/grad_mode.h"
#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/dispatch.h"

namespace weft::optim {

namespace {

// Elements per call of a rule's slice kernel when the segment has a copy to write: small enough
// that the updated slice is still in L1/L2 when it is converted, a multiple of 16 so every call
// starts on a whole vector.
constexpr int64_t kCopyBlock = 4096;

// copy[begin, end) = param[begin, end) converted to the copy's dtype, with the conversion every
// cast uses (core/convert.h), so a copy is bit for bit what .to(dtype) gives.
void write_copy(const void* param, DType param_dtype, void* copy, DType copy_dtype, int64_t begin, int64_t end) {
  cpu::visit_floating(param_dtype, "low-precision copy", [&](auto from_tag) {
    using From = decltype(from_tag);
    cpu::visit_floating(copy_dtype, "low-precision copy", [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* src = static_cast<const From*>(param);
      To* dst = static_cast<To*>(copy);
      for (int64_t j = begin; j < end; ++j) dst[j] = convert<To>(src[j]);
    });
  });
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return "{" + out + "}";
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, double lr)
    : name_(std::move(name)), params_(std::move(params)), steps_(params_.size(), 0) {
  set_lr(lr);
  WEFT_CHECK(!params_.empty(), ValueError, name_, ": got an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    WEFT_CHECK(p.defined(), ValueError, name_, ": parameter ", i, " is an undefined tensor");
    WEFT_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, DTypeError, name_, ": parameter ", i,
               " is ", dtype_name(p.dtype()), ", but optimizers update f32 or f64 parameters; "
               "train lower-precision models through f32 master weights (weft::amp)");
    WEFT_CHECK(p.device().is_cpu(), DeviceError, name_, ": parameter ", i, " is on ", p.device(),
               "; this build updates CPU parameters only");
    WEFT_CHECK(p.is_leaf(), ValueError, name_, ": parameter ", i, " is not a leaf (it has a grad_fn); "
               "optimize the leaf tensors the model owns");
    WEFT_CHECK(p.is_contiguous(), ValueError, name_, ": parameter ", i, " of shape ", shape_str(p.shape()),
               " is not contiguous; pass contiguous parameters");
    WEFT_CHECK(seen.insert(p.impl()).second, ValueError, name_, ": parameter ", i,
               " appears twice in the parameter list; it would be updated twice per step");
  }
  // Each slice starts on a 64-byte boundary (flat_ is 64-byte aligned, as every allocation).
  std::map<DType, int64_t> used;
  for (const Tensor& p : params_) {
    const int64_t align = 64 / static_cast<int64_t>(p.element_size());
    int64_t& end = used[p.dtype()];
    offsets_.push_back(end);
    end += (p.numel() + align - 1) / align * align;
  }
}

void Optimizer::ensure_flat_state() {
  if (!flat_.empty()) return;
  std::map<DType, int64_t> total;
  for (size_t i = 0; i < params_.size(); ++i)
    total[params_[i].dtype()] = offsets_[i] + params_[i].numel();
  const size_t buffers = buffer_names().size();
  for (const auto& [dtype, numel] : total)
    for (size_t k = 0; k < buffers; ++k) flat_[dtype].push_back(Tensor::zeros({numel}, dtype));
}

Tensor Optimizer::buffer_view(size_t param_index, size_t k) const {
  const Tensor& p = params_[param_index];
  return flat_.at(p.dtype())[k].as_strided(p.shape(), contiguous_strides(p.shape()), offsets_[param_index]);
}

void Optimizer::step(double grad_factor) {
  NoGradGuard no_grad;
  const size_t buffers = buffer_names().size();
  std::vector<Segment> segments;
  std::vector<Tensor> grads;  // contiguous (a strided grad's copy, kept alive for the pass)
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor& grad = grad_sources_.empty() ? p.grad() : grad_sources_[i].grad();
    if (!grad.defined()) continue;  // set_grad saw to it that a grad matches its parameter
    if (buffers > 0) ensure_flat_state();
    grads.push_back(grad.contiguous_untracked());
    Segment s{p.data_ptr(), grads.back().data_ptr(), {}, p.numel(), ++steps_[i], p.dtype()};
    s.grad_dtype = grad.dtype();
    if (!copies_.empty()) {
      s.copy = copies_[i].data_ptr();
      s.copy_dtype = copies_[i].dtype();
    }
    for (size_t k = 0; k < buffers; ++k) {
      Tensor b = buffer_view(i, k);
      if (s.step == 1) b.zero_();
      s.buffers.push_back(b.data_ptr());
    }
    segments.push_back(std::move(s));
  }
  if (!segments.empty()) update(segments, grad_factor);
}

void Optimizer::for_each_slice(const std::vector<Segment>& segments,
                               const std::function<void(size_t, int64_t, int64_t)>& slice) {
  // starts[i]: segment i's first element in the concatenation of all segments.
  std::vector<int64_t> starts(segments.size() + 1, 0);
  for (size_t i = 0; i < segments.size(); ++i) starts[i + 1] = starts[i] + segments[i].numel;
  const int64_t total = starts.back();
  // Where a thread's range [at(t), at(t + 1)) begins: the even split point, moved back to a
  // multiple of 16 elements of the segment it falls in, so a thread's vector loop starts on a
  // whole vector (and a 64-byte boundary for f32) of every tensor.
  auto at = [&](int64_t t, int64_t threads) -> std::pair<size_t, int64_t> {
    const int64_t point = total / threads * t + total % threads * t / threads;
    const size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), point) - starts.begin()) - 1;
    if (i == segments.size()) return {i, 0};
    return {i, (point - starts[i]) / 16 * 16};
  };
#pragma omp parallel if (total >= kParallelGrain)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    auto [i, begin] = at(t, threads);
    const auto [last, end] = at(t + 1, threads);
    for (; i < last || (i == last && begin < end); ++i, begin = 0) {
      const Segment& s = segments[i];
      const int64_t stop = i == last ? end : s.numel;
      if (!s.copy) {
        if (begin < stop) slice(i, begin, stop);
        continue;
      }
      for (int64_t b = begin; b < stop; b += kCopyBlock) {
        const int64_t e = std::min(stop, b + kCopyBlock);
        slice(i, b, e);
        write_copy(s.param, s.dtype, s.copy, s.copy_dtype, b, e);
      }
    }
  }
}

void Optimizer::keep_low_precision_copies(DType dtype) {
  WEFT_CHECK(dtype == DType::bf16 || dtype == DType::f16, DTypeError, name_,
             ": low-precision copies are bf16 or f16, got ", dtype_name(dtype));
  int64_t total = 0;
  for (const Tensor& p : params_) total += p.numel();
  Tensor flat = Tensor::empty({total}, dtype);
  copies_.clear();
  int64_t offset = 0;
  for (const Tensor& p : params_) {
    copies_.push_back(flat.as_strided(p.shape(), contiguous_strides(p.shape()), offset));
    write_copy(p.data_ptr(), p.dtype(), copies_.back().data_ptr(), dtype, 0, p.numel());
    offset += p.numel();
  }
}

void Optimizer::keep_masters_of(const std::vector<Tensor>& model_params) {
  WEFT_CHECK(model_params.size() == params_.size(), ValueError, name_, ": ", model_params.size(),
             " model parameters for ", params_.size(), " master weights");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor &master = params_[i], &p = model_params[i];
    WEFT_CHECK(master.dtype() == DType::f32, DTypeError, name_, ": master weight ", i, " is ",
               dtype_name(master.dtype()), "; master weights are f32");
    WEFT_CHECK(p.defined() && (p.dtype() == DType::bf16 || p.dtype() == DType::f16) && p.is_leaf() &&
                   p.is_contiguous() && p.shape() == master.shape(),
               ValueError, name_, ": model parameter ", i, " must be a contiguous bf16 or f16 leaf of its master's shape ",
               shape_str(master.shape()), ", got ", p.defined() ? str(dtype_name(p.dtype()), " ", shape_str(p.shape())) : std::string("none"));
  }
  grad_sources_ = model_params;
  copies_ = model_params;
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    write_copy(params_[i].data_ptr(), DType::f32, copies_[i].data_ptr(), copies_[i].dtype(), 0, params_[i].numel());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : grad_sources_.empty() ? params_ : grad_sources_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

void Optimizer::set_lr(double lr) {
  check_non_negative("learning rate", lr);
  lr_ = lr;
}

void Optimizer::check_non_negative(const char* what, double value) const {
  WEFT_CHECK(value >= 0, ValueError, name_, ": ", what, " must be >= 0, got ", value);
}

NamedTensors Optimizer::state(size_t param_index) const {
  WEFT_CHECK(param_index < params_.size(), IndexError, name_, ": state of parameter ", param_index,
             ", but there are ", params_.size(), " parameters");
  NamedTensors out;
  if (steps_[param_index] == 0) return out;
  const std::vector<std::string> names = buffer_names();
  for (size_t k = 0; k < names.size(); ++k) out.emplace_back(names[k], buffer_view(param_index, k));
  if (has_masters()) out.emplace_back("master", params_[param_index]);
  return out;
}

int64_t Optimizer::step_count(size_t param_index) const {
  WEFT_CHECK(param_index < params_.size(), IndexError, name_, ": step count of parameter ", param_index,
             ", but there are ", params_.size(), " parameters");
  return steps_[param_index];
}

void Optimizer::set_state(size_t param_index, int64_t step, const NamedTensors& buffers) {
  WEFT_CHECK(param_index < params_.size(), IndexError, name_, ": state for parameter ", param_index,
             ", but there are ", params_.size(), " parameters");
  write_state(check_state(param_index, step, buffers, str("parameter ", param_index)));
}

Optimizer::CheckedState Optimizer::check_state(size_t param_index, int64_t step, const NamedTensors& buffers,
                                               const std::string& who) const {
  WEFT_CHECK(step >= 0, ValueError, name_, ": step count must be >= 0, got ", step);
  if (step == 0) {
    WEFT_CHECK(buffers.empty(), ValueError, name_, ": ", who,
               " has step count 0 but ", buffers.size(), " buffers; a fresh parameter has none");
    return {param_index, 0, {}};
  }
  const Tensor& p = params_[param_index];
  const std::vector<std::string> names = state_names();
  std::vector<std::string> given;
  for (const auto& [n, t] : buffers) given.push_back(n);
  const std::string mismatch = str(name_, ": ", who, " state needs buffers ", join(names),
                                   ", got ", join(given));
  WEFT_CHECK(buffers.size() == names.size(), ValueError, mismatch);
  CheckedState checked{param_index, step, {}};
  for (const std::string& n : names) {
    auto it = std::find_if(buffers.begin(), buffers.end(), [&](const auto& b) { return b.first == n; });
    WEFT_CHECK(it != buffers.end(), ValueError, mismatch);
    WEFT_CHECK(it->second.defined() && it->second.shape() == p.shape(), ShapeError, name_, ": buffer '", n,
               "' of ", who, " must have the parameter's shape ", shape_str(p.shape()),
               ", got ", it->second.defined() ? shape_str(it->second.shape()) : "an undefined tensor");
    checked.buffers.push_back(it->second);
  }
  return checked;
}

std::vector<std::string> Optimizer::state_names() const {
  std::vector<std::string> names = buffer_names();
  if (has_masters()) names.push_back("master");
  return names;
}

void Optimizer::write_state(const CheckedState& s) {
  steps_[s.index] = s.step;
  if (s.buffers.empty()) return;
  ensure_flat_state();
  const size_t buffers = buffer_names().size();
  for (size_t k = 0; k < buffers; ++k) buffer_view(s.index, k).copy_(s.buffers[k]);
  if (!has_masters()) return;
  Tensor master = params_[s.index];
  master.copy_(s.buffers[buffers]);
  write_copy(master.data_ptr(), DType::f32, copies_[s.index].data_ptr(), copies_[s.index].dtype(), 0, master.numel());
}

std::vector<std::string> Optimizer::state_keys(const std::vector<std::string>& param_names) const {
  std::vector<std::string> keys;
  if (param_names.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) keys.push_back(std::to_string(i));
    return keys;
  }
  WEFT_CHECK(param_names.size() == params_.size(), ValueError, name_, ": ", param_names.size(),
             " parameter names for ", params_.size(), " parameters; give one name per parameter");
  std::unordered_set<std::string> seen;
  for (const std::string& n : param_names)
    WEFT_CHECK(!n.empty() && seen.insert(n).second, ValueError, name_, ": parameter name '", n,
               "' is empty or given twice; state-dict keys must tell the parameters apart");
  return param_names;
}

std::map<std::string, Tensor> Optimizer::state_dict(const std::vector<std::string>& param_names) const {
  const std::vector<std::string> keys = state_keys(param_names);
  std::map<std::string, Tensor> dict;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps_[i] == 0) continue;
    dict[keys[i] + ".step"] = Tensor::scalar(static_cast<double>(steps_[i]), DType::i64);
    for (const auto& [name, buffer] : state(i))
      dict[keys[i] + "." + name] = Tensor::empty(buffer.shape(), buffer.dtype()).copy_(buffer);
  }
  return dict;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& dict, const std::vector<std::string>& param_names) {
  struct Entry {
    int64_t step = -1;  // -1: the dict has no "KEY.step"
    NamedTensors buffers;
  };
  const bool by_name = !param_names.empty();
  const std::vector<std::string> keys = state_keys(param_names);
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < keys.size(); ++i) index_of[keys[i]] = i;
  auto who = [&](size_t i) { return by_name ? str("parameter '", keys[i], "'") : str("parameter ", i); };

  std::map<size_t, Entry> entries;
  for (const auto& [key, value] : dict) {
    // Buffer names have no dots, parameter names do: the field is what follows the last one.
    const size_t dot = key.rfind('.');
    WEFT_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < key.size(), ValueError, name_,
               ": load_state_dict: key '", key, "' is not '", by_name ? "param_name" : "param_index", ".field'");
    const std::string param = key.substr(0, dot), field = key.substr(dot + 1);
    auto it = index_of.find(param);
    if (it == index_of.end()) {
      if (by_name)
        throw ValueError(str(name_, ": load_state_dict: state for parameter '", param,
                             "', but there is no parameter of that name (renamed or removed?); "
                             "load it into the model it was saved from"));
      size_t index = 0;
      auto [end, err] = std::from_chars(param.data(), param.data() + param.size(), index);
      WEFT_CHECK(err == std::errc() && end == param.data() + param.size(), ValueError, name_,
                 ": load_state_dict: key '", key, "' is not 'param_index.field'");
      throw IndexError(str(name_, ": load_state_dict: key '", key, "' names parameter ", index, ", but there are ",
                           params_.size(), " parameters"));
    }
    const size_t index = it->second;
    if (field == "step") {
      double v = value.defined() && value.numel() == 1 ? value.item() : -1;
      // (Below 2^63, so that the conversion to int64_t is defined.)
      WEFT_CHECK(v >= 0 && std::floor(v) == v && v < 0x1p63, ValueError, name_, ": load_state_dict: '", key,
                 "' must be one non-negative integer below 2^63, found ", v);
      entries[index].step = static_cast<int64_t>(v);
    } else {
      entries[index].buffers.emplace_back(field, value);
    }
  }
  // Everything is checked before anything is written, so a rejected dict leaves the old state.
  std::vector<CheckedState> checked;
  for (const auto& [index, e] : entries) {
    WEFT_CHECK(e.step >= 0, ValueError, name_, ": load_state_dict: ", who(index), " has buffers but no '",
               keys[index], ".step'");
    checked.push_back(check_state(index, e.step, e.buffers, who(index)));
  }
  if (std::any_of(checked.begin(), checked.end(), [](const CheckedState& s) { return !s.buffers.empty(); }))
    ensure_flat_state();
  std::fill(steps_.begin(), steps_.end(), 0);
  for (const CheckedState& s : checked) write_state(s);
}

}  // namespace weft::optim
