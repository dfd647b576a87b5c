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
//
// Calling a module. operator() is the one path into a module, and a parent calls each child
// through it too (never child->forward), so code that must act around a module can: ZeRO-3
// gathers a block's parameters before it runs and frees them after (in the recompute of an
// activation checkpoint as well), a profiler opens and closes a scope, a pipeline runs blocks up
// to a cut. operator() runs the forward pre-hooks, forward, then the forward hooks, as
// torch.nn.Module.__call__:
//   - a pre-hook gets (module, input) and may return a tensor that replaces the input;
//   - a forward hook gets (module, input, output) and may return a tensor that replaces the output;
//   - each sees what the one before it returned; an exception from forward skips the forward hooks.
// Hooks get the module, not its name: a module may sit at several places, or none, so its name
// is the caller's knowledge. Register them from named_modules() and capture the name:
//     for (auto& [name, m] : model.named_modules())
//       handles.push_back(m->register_forward_pre_hook([name](Module&, const Tensor&) { ...; return std::nullopt; }));
// Forwards with more arguments (GPT's and the blocks' KV-cache forwards) run the same hooks
// through call_with_hooks: the hooks see the tensor argument and the output, not the cache.
// With no hook registered a call costs two null-pointer tests more than forward (core/hooks.h):
// no allocation, no std::function call; bench/bench_module_call measures under a nanosecond a
// call, against milliseconds for a GPT forward of 54 module calls.
//
// Swapping a child. A module that calls a child through a member registers it with that member
// (register_module(name, member, module)); replace_module then assigns the member and the
// registered child together and keeps the child's place in the order, so state-dict names stay
// the same and forward runs the replacement: tensor parallelism puts a column-parallel Linear
// where GPT's attention holds its c_attn. A member of type shared_ptr<Module> takes any module;
// a typed one only its type.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/core/hooks.h"
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
  Tensor operator()(const Tensor& x) {
    return call_with_hooks(x, [this](const Tensor& input) { return forward(input); });
  }
  // Runs body(input) between this module's hooks: what operator() does with forward, for
  // forwards that take more than a tensor.
  template <typename Body>
  Tensor call_with_hooks(const Tensor& input, Body&& body) {
    if (forward_pre_hooks_.empty() && forward_hooks_.empty()) return body(input);
    Tensor x = run_forward_pre_hooks(input);
    return run_forward_hooks(x, body(x));
  }

  // Hooks, run in registration order; a handle's remove() unregisters its hook (safe twice, and
  // after the module died; see core/hooks.h for hooks that register or remove hooks).
  using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
  using ForwardHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;
  RemovableHandle register_forward_pre_hook(ForwardPreHook hook) { return forward_pre_hooks_.add(std::move(hook)); }
  RemovableHandle register_forward_hook(ForwardHook hook) { return forward_hooks_.add(std::move(hook)); }
  bool has_forward_hooks() const { return !forward_pre_hooks_.empty() || !forward_hooks_.empty(); }

  // Registration. Names must be non-empty, without dots, and unique within this module.
  // A parameter becomes a leaf that requires grad (a tensor with history is detached first);
  // registering the same tensor in two places ties them (one parameter, two names).
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  // A child that forward calls through `member` (a member of the derived class, set here):
  //     register_module("c_fc", c_fc, std::make_shared<Linear>(dim, hidden));
  template <typename M>
  void register_module(const std::string& name, std::shared_ptr<M>& member, std::type_identity_t<std::shared_ptr<M>> module) {
    add_child(name, module, [&member](const std::shared_ptr<Module>& replacement) {
      std::shared_ptr<M> typed = std::dynamic_pointer_cast<M>(replacement);
      if (!typed) return false;
      member = std::move(typed);
      return true;
    });
    member = std::move(module);
  }
  // A child that forward reaches through named_children() (Sequential's). A module that keeps
  // the child in a member must use the form above, or replace_module would leave the member
  // running the old child.
  void register_module(const std::string& name, std::shared_ptr<Module> module) { add_child(name, std::move(module), {}); }
  // Puts `module` in the place of the child `name` (same name, same position); a typed member
  // that cannot hold it → ValueError, and nothing changes. Reach a deeper one with get_submodule:
  //     model.get_submodule("h.0.mlp").replace_module("c_fc", column_parallel_fc);
  void replace_module(const std::string& name, std::shared_ptr<Module> module);

  // Traversal, pre-order: this module's own entries, then each child's. named_parameters and
  // parameters list a tied parameter once, under its first name.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module ("") and every descendant under its dotted name ("h.0.attn"), pre-order, a
  // module reachable by two paths once under its first (torch's named_modules). The pointers do
  // not own: they live as long as this module holds them.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Lookups by dotted name, as torch's get_submodule / get_parameter; "" is this module. For
  // code that needs a child's tensor without knowing its type (GPT's output projection reads
  // wte's "weight", whatever module holds it). A name that does not resolve → ValueError.
  Module& get_submodule(const std::string& path);
  Tensor get_parameter(const std::string& path);
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
  // `assign` puts a replacement into the member holding the child and says whether its type fit;
  // empty for a child reached through the registry.
  using AssignChild = std::function<bool(const std::shared_ptr<Module>&)>;
  void add_child(const std::string& name, std::shared_ptr<Module> module, AssignChild assign);
  Tensor run_forward_pre_hooks(const Tensor& input);
  Tensor run_forward_hooks(const Tensor& input, Tensor output);
  void check_new_name(const std::string& name, const char* what) const;
  // Visits (hierarchical name, tensor) for each parameter (and buffer when asked), pre-order.
  template <typename Fn> void visit(const std::string& prefix, bool params, bool buffers, Fn&& fn) const;

  std::string name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<AssignChild> assign_child_;  // beside children_
  HookList<ForwardPreHook> forward_pre_hooks_;
  HookList<ForwardHook> forward_hooks_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace weft::nn
