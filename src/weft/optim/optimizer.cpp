#include "weft/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_set>
#include <utility>

#include "weft/autograd/grad_mode.h"

namespace weft::optim {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return "{" + out + "}";
}

}  // namespace

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, double lr)
    : name_(std::move(name)), params_(std::move(params)), state_(params_.size()) {
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
}

void Optimizer::step() {
  NoGradGuard no_grad;
  const std::vector<std::string> names = buffer_names();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    ParamState& s = state_[i];
    if (s.step == 0)
      for (size_t k = 0; k < names.size(); ++k) s.buffers.push_back(Tensor::zeros(p.shape(), p.dtype()));
    ++s.step;
    update(p, p.grad().contiguous_untracked(), s.buffers, s.step);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
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
  const ParamState& s = state_[param_index];
  const std::vector<std::string> names = buffer_names();
  NamedTensors out;
  for (size_t k = 0; k < s.buffers.size(); ++k) out.emplace_back(names[k], s.buffers[k]);
  return out;
}

int64_t Optimizer::step_count(size_t param_index) const {
  WEFT_CHECK(param_index < params_.size(), IndexError, name_, ": step count of parameter ", param_index,
             ", but there are ", params_.size(), " parameters");
  return state_[param_index].step;
}

void Optimizer::set_state(size_t param_index, int64_t step, const NamedTensors& buffers) {
  WEFT_CHECK(param_index < params_.size(), IndexError, name_, ": state for parameter ", param_index,
             ", but there are ", params_.size(), " parameters");
  set_state(param_index, step, buffers, str("parameter ", param_index));
}

void Optimizer::set_state(size_t param_index, int64_t step, const NamedTensors& buffers, const std::string& who) {
  WEFT_CHECK(step >= 0, ValueError, name_, ": step count must be >= 0, got ", step);
  if (step == 0) {
    WEFT_CHECK(buffers.empty(), ValueError, name_, ": ", who,
               " has step count 0 but ", buffers.size(), " buffers; a fresh parameter has none");
    state_[param_index] = {};
    return;
  }
  const Tensor& p = params_[param_index];
  const std::vector<std::string> names = buffer_names();
  std::vector<std::string> given;
  for (const auto& [n, t] : buffers) given.push_back(n);
  const std::string mismatch = str(name_, ": ", who, " state needs buffers ", join(names),
                                   ", got ", join(given));
  WEFT_CHECK(buffers.size() == names.size(), ValueError, mismatch);
  ParamState loaded{step, {}};
  for (const std::string& n : names) {
    auto it = std::find_if(buffers.begin(), buffers.end(), [&](const auto& b) { return b.first == n; });
    WEFT_CHECK(it != buffers.end(), ValueError, mismatch);
    WEFT_CHECK(it->second.defined() && it->second.shape() == p.shape(), ShapeError, name_, ": buffer '", n,
               "' of ", who, " must have the parameter's shape ", shape_str(p.shape()),
               ", got ", it->second.defined() ? shape_str(it->second.shape()) : "an undefined tensor");
    loaded.buffers.push_back(Tensor::empty(p.shape(), p.dtype()).copy_(it->second));
  }
  state_[param_index] = std::move(loaded);
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
  const std::vector<std::string> names = buffer_names();
  std::map<std::string, Tensor> dict;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    dict[keys[i] + ".step"] = Tensor::scalar(static_cast<double>(s.step), DType::i64);
    for (size_t k = 0; k < names.size(); ++k)
      dict[keys[i] + "." + names[k]] = Tensor::empty(s.buffers[k].shape(), s.buffers[k].dtype()).copy_(s.buffers[k]);
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
  // Load into fresh state, and keep the old one if anything in the dict is rejected.
  std::vector<ParamState> previous = std::exchange(state_, std::vector<ParamState>(params_.size()));
  try {
    for (const auto& [index, e] : entries) {
      WEFT_CHECK(e.step >= 0, ValueError, name_, ": load_state_dict: ", who(index), " has buffers but no '",
                 keys[index], ".step'");
      set_state(index, e.step, e.buffers, who(index));
    }
  } catch (...) {
    state_ = std::move(previous);
    throw;
  }
}

}  // namespace weft::optim
