// Optimizer: the base of every update rule (SGD, Adam/AdamW).
//
// An optimizer owns a fixed list of parameters (contiguous f32 or f64 leaf tensors; keep f32
// master weights for lower-precision models) and per-parameter state: a step count and the
// named buffers its rule needs ("momentum_buffer", "exp_avg", ...), each of the parameter's
// shape and dtype. step() updates, in place and without recording autograd, every parameter
// whose grad is defined; a parameter without a grad is skipped and its state left untouched
// (as in PyTorch), so step counts are per parameter.
//
// Invariant: a parameter's step count is 0 exactly when it has no buffers; the buffers are
// created (zero-filled) on its first update. State is reachable by parameter index, so a ZeRO
// shard's optimizer holds state only for the parameters (or flat shards) it was given, and a
// checkpoint can save state_dict() and load_state_dict() it into a fresh optimizer. Given the
// parameters' names, the state dict is keyed by name instead of position, so a checkpoint stays
// readable when the parameter list is cut differently (a sharded checkpoint maps names).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  // `name` ("SGD", "Adam", ...) prefixes error messages.
  Optimizer(std::string name, std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a grad.
  void step();
  // Drops every grad (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);  // takes effect at the next step(); negative → ValueError
  const std::vector<Tensor>& params() const { return params_; }
  const std::string& name() const { return name_; }

  // Parameter i's buffers, aliasing the live state (empty before its first update).
  NamedTensors state(size_t param_index) const;
  int64_t step_count(size_t param_index) const;
  // Replaces parameter i's state with copies of `buffers` (every name the rule keeps, each of
  // the parameter's shape; converted to its dtype). step 0 with no buffers resets it.
  void set_state(size_t param_index, int64_t step, const NamedTensors& buffers);

  // All state as "KEY.buffer" → buffer copy and "KEY.step" → 0-d i64 tensor, for parameters
  // that have been updated at least once. A parameter's KEY is param_names[i] when names are
  // given ("h.0.attn.c_attn.weight.exp_avg"), else its index i ("0.exp_avg"). Names must be
  // unique and non-empty, one per parameter (ValueError otherwise).
  std::map<std::string, Tensor> state_dict(const std::vector<std::string>& param_names = {}) const;
  // Replaces all state with `dict` (as state_dict() writes it, with the same param_names);
  // parameters it does not mention start fresh. A malformed dict (a key naming no parameter,
  // missing step or buffer, wrong shape) throws, naming the parameter, and leaves the state as
  // it was.
  void load_state_dict(const std::map<std::string, Tensor>& dict, const std::vector<std::string>& param_names = {});

 protected:
  // The buffers the rule keeps per parameter, in the order update() receives them.
  virtual std::vector<std::string> buffer_names() const = 0;
  // Updates `param` in place from `grad` (both contiguous, same shape and dtype); `buffers`
  // follow buffer_names(); `step` counts this update (1 on the first).
  virtual void update(Tensor& param, const Tensor& grad, std::vector<Tensor>& buffers, int64_t step) = 0;

  // Throws ValueError naming this optimizer and `what` unless value >= 0 (NaN fails too).
  void check_non_negative(const char* what, double value) const;

 private:
  struct ParamState {
    int64_t step = 0;
    std::vector<Tensor> buffers;
  };
  // Each parameter's state-dict key: param_names, checked, or the indices.
  std::vector<std::string> state_keys(const std::vector<std::string>& param_names) const;
  // set_state, with `who` ("parameter 3", "parameter 'wte.weight'") in its errors.
  void set_state(size_t param_index, int64_t step, const NamedTensors& buffers, const std::string& who);

  std::string name_;
  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
  double lr_;
};

}  // namespace weft::optim
