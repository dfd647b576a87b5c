#include "weft/nn/module.h"

#include <algorithm>
#include <unordered_set>

namespace weft::nn {

void StateDict::insert(const std::string& name, const Tensor& t) {
  auto [it, added] = index_.try_emplace(name, items_.size());
  if (added) items_.emplace_back(name, t);
  else items_[it->second].second = t;
}

const Tensor& StateDict::at(const std::string& name) const {
  auto it = index_.find(name);
  WEFT_CHECK(it != index_.end(), ValueError, "state dict has no key '", name, "'");
  return items_[it->second].second;
}

void StateDict::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  size_t removed = it->second;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(removed));
  index_.erase(it);
  for (auto& [key, position] : index_)
    if (position > removed) --position;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  WEFT_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, name_, ": ", what,
             " name '", name, "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& entries) {
    return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
  };
  WEFT_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), ValueError, name_,
             ": cannot register ", what, " '", name, "': the name is already in use");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name, "parameter");
  WEFT_CHECK(t.defined(), ValueError, name_, ": parameter '", name, "' is an undefined tensor");
  if (!t.is_leaf()) t = t.detach();
  t.requires_grad_(true);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  WEFT_CHECK(t.defined(), ValueError, name_, ": buffer '", name, "' is an undefined tensor");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module, AssignChild assign) {
  check_new_name(name, "module");
  WEFT_CHECK(module != nullptr, ValueError, name_, ": module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
  assign_child_.push_back(std::move(assign));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& child) { return child.first == name; });
  WEFT_CHECK(it != children_.end(), ValueError, name_, ": no child module '", name, "' to replace");
  WEFT_CHECK(module != nullptr, ValueError, name_, ": cannot replace '", name, "' with a null module");
  const AssignChild& assign = assign_child_[static_cast<size_t>(it - children_.begin())];
  WEFT_CHECK(!assign || assign(module), ValueError, name_, ": cannot replace '", name, "' (a ", it->second->name(),
             ") with a ", module->name(), ": ", name_, " calls it through a member of another type");
  it->second = std::move(module);
}

Tensor Module::run_forward_pre_hooks(const Tensor& input) {
  Tensor x = input;
  forward_pre_hooks_.for_each([&](const ForwardPreHook& hook) {
    if (std::optional<Tensor> replaced = hook(*this, x)) x = std::move(*replaced);
  });
  return x;
}

Tensor Module::run_forward_hooks(const Tensor& input, Tensor output) {
  forward_hooks_.for_each([&](const ForwardHook& hook) {
    if (std::optional<Tensor> replaced = hook(*this, input, output)) output = std::move(*replaced);
  });
  return output;
}

template <typename Fn>
void Module::visit(const std::string& prefix, bool params, bool buffers, Fn&& fn) const {
  if (params)
    for (const auto& [name, t] : parameters_) fn(prefix + name, t);
  if (buffers)
    for (const auto& [name, t] : buffers_) fn(prefix + name, t);
  for (const auto& [name, child] : children_) child->visit(prefix + name + ".", params, buffers, fn);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::unordered_set<TensorImpl*> seen;
  visit("", true, false, [&](const std::string& name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.emplace_back(name, t);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  visit("", false, true, [&](const std::string& name, const Tensor& t) { out.emplace_back(name, t); });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<Module*> seen;
  auto visit_module = [&](auto& self, const std::string& name, Module& module) -> void {
    if (!seen.insert(&module).second) return;
    out.emplace_back(name, &module);
    for (const auto& [child_name, child] : module.children_)
      self(self, name.empty() ? child_name : name + "." + child_name, *child);
  };
  visit_module(visit_module, "", *this);
  return out;
}

Module& Module::get_submodule(const std::string& path) {
  Module* module = this;
  for (size_t begin = 0; !path.empty() && begin <= path.size();) {
    const size_t end = std::min(path.find('.', begin), path.size());
    const std::string part = path.substr(begin, end - begin);
    auto it = std::find_if(module->children_.begin(), module->children_.end(),
                           [&](const auto& child) { return child.first == part; });
    WEFT_CHECK(it != module->children_.end(), ValueError, name_, ": no submodule '", path, "' (", module->name_,
               " has no child '", part, "')");
    module = it->second.get();
    begin = end + 1;
  }
  return *module;
}

Tensor Module::get_parameter(const std::string& path) {
  const size_t dot = path.rfind('.');
  const Module& owner = dot == std::string::npos ? *this : get_submodule(path.substr(0, dot));
  const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  for (const auto& [parameter_name, t] : owner.parameters_)
    if (parameter_name == name) return t;
  throw ValueError(str(name_, ": no parameter '", path, "' (", owner.name_, " has no parameter '", name, "')"));
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  visit("", true, true, [&](const std::string& name, const Tensor& t) { out.insert(name, t.detach()); });
  return out;
}

static std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return "[" + out + "]";
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  LoadResult result;
  for (const auto& [key, t] : own)
    if (!state.contains(key)) result.missing_keys.push_back(key);
  for (const auto& [key, t] : state)
    if (!own.contains(key)) result.unexpected_keys.push_back(key);
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string message = "load_state_dict into " + name_ + ":";
    if (!result.missing_keys.empty()) message += " missing keys " + join(result.missing_keys) + ";";
    if (!result.unexpected_keys.empty()) message += " unexpected keys " + join(result.unexpected_keys) + ";";
    throw ValueError(message + " pass strict=false to skip them");
  }
  for (const auto& [key, t] : own) {
    if (!state.contains(key)) continue;
    const Tensor& source = state.at(key);
    WEFT_CHECK(source.defined() && source.shape() == t.shape(), ShapeError, "load_state_dict: size mismatch for ",
               key, ": the state dict has ", source.defined() ? shape_str(source.shape()) : "an undefined tensor",
               ", the model has ", shape_str(t.shape()));
  }
  // copy_ is not recorded by autograd, so writing into parameters needs no NoGradGuard.
  for (auto [key, t] : own)
    if (state.contains(key)) t.copy_(state.at(key));
  return result;
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

static Tensor converted(const Tensor& t, DType dtype) { return Tensor::empty(t.shape(), dtype).copy_(t); }

Module& Module::to(DType dtype) {
  WEFT_CHECK(is_floating(dtype), DTypeError, name_, ".to: expected a floating dtype, got ", dtype_name(dtype));
  // A tied tensor is visited twice; the second visit finds it converted already.
  visit("", true, true, [&](const std::string&, const Tensor& t) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
    Tensor values = converted(t, dtype);
    TensorImpl* impl = t.impl();
    impl->storage = values.storage();
    impl->strides = values.strides();
    impl->offset = 0;
    impl->dtype = dtype;
    if (impl->grad.defined()) impl->grad = converted(impl->grad, dtype);
  });
  return *this;
}

std::string Module::repr() const {
  std::string out = name_ + "(";
  if (children_.empty()) return out + extra_repr() + ")";
  out += "\n";
  if (!extra_repr().empty()) out += "  " + extra_repr() + "\n";
  for (const auto& [name, child] : children_) {
    std::string text = child->repr();
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) text.insert(at + 1, "  ");
    out += "  (" + name + "): " + text + "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.repr(); }

}  // namespace weft::nn
