// Module: the base of every layer and model, as torch.nn.Module.
//
// A Module owns named parameters (leaf tensors that require grad), named buffers (state that is
// saved but not trained, e.g. BatchNorm's running statistics) and named child modules, all kept
// in registration order. Hierarchical names join the path with dots: "layers.0.weight".
//
// Invariant: once registered, a parameter or buffer is only ever changed in place (its
// TensorImpl is updated: load_state_dict copies values into it, to() swaps its storage and
// dtype), so the handles a layer keeps in its members, and the ones an optimizer holds, always
// see the current values.
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Name -> tensor in insertion order (PyTorch's OrderedDict state_dict).
class StateDict {
 public:
  void insert(const std::string& name, const Tensor& t);  // replaces an entry of the same name in place
  bool contains(const std::string& name) const { return index_.contains(name); }
  const Tensor& at(const std::string& name) const;  // throws ValueError naming the key
  void erase(const std::string& name);
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  NamedTensors items_;
  std::unordered_map<std::string, size_t> index_;
};

// Keys that a non-strict load_state_dict skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the model, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the model
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Registration. Names must be non-empty, without dots, and unique within this module.
  // A parameter becomes a leaf that requires grad (a tensor with history is detached first);
  // registering the same tensor in two places ties them (one parameter, two names).
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Traversal, pre-order: this module's own entries, then each child's. named_parameters and
  // parameters list a tied parameter once, under its first name.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  int64_t num_parameters() const;

  // Training mode (Dropout, BatchNorm), set recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Every parameter and buffer by hierarchical name (tied ones under each name): detached
  // tensors sharing the module's storage.
  StateDict state_dict() const;
  // Copies values in place, converting dtype. Shapes must match (ShapeError naming the key and
  // both shapes). Strict: a missing or unexpected key is a ValueError naming them all; otherwise
  // they are skipped and returned. Nothing is copied unless every check passes.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  void zero_grad();  // drops every parameter's .grad (set to none, as PyTorch's default)
  // Converts floating parameters and buffers (and their grads) to `dtype` in place; they stay
  // leaves and parameters keep requires_grad. Integer buffers (step counters) are left alone.
  // Tensors taken from the module earlier (state_dict entries, views) keep the old storage.
  Module& to(DType dtype);

  const std::string& name() const { return name_; }  // the type name: "Linear"
  virtual std::string extra_repr() const { return ""; }  // "in_features=784, out_features=512, bias=True"
  std::string repr() const;  // the module tree, as PyTorch's print(model)

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  // Visits (hierarchical name, tensor) for each parameter (and buffer when asked), pre-order.
  template <typename Fn> void visit(const std::string& prefix, bool params, bool buffers, Fn&& fn) const;

  std::string name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace weft::nn
