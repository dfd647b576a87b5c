// Optimizer: the base of every update rule (SGD, Adam/AdamW).
//
// An optimizer owns a fixed list of parameters (contiguous f32 or f64 leaf tensors; keep f32
// master weights for lower-precision models) and per-parameter state: a step count and the
// named buffers its rule needs ("momentum_buffer", "exp_avg", ...), each of the parameter's
// shape and dtype. step() updates, in place and without recording autograd, every parameter
// whose grad is defined; a parameter without a grad is skipped and its state left untouched
// (as in PyTorch), so step counts are per parameter.
//
// Layout: the state is flat. For each buffer name and dtype there is ONE allocation holding every
// parameter's buffer of that dtype in list order, each starting on a 64-byte boundary; a
// parameter's buffer is a view of its slice. The update is then one pass over contiguous state
// (step(): one parallel region over the elements of every parameter that has a grad, split
// evenly across threads, whatever the tensors' sizes), and a ZeRO shard can own a flat range.
// The flat buffers are allocated, for every parameter, at the first update or set_state().
//
// Invariant: a parameter's step count is 0 exactly when it has no buffers (state() is empty);
// its slices are zero-filled at its first update. State is reachable by parameter index, so a
// ZeRO shard's optimizer holds state only for the parameters (or flat shards) it was given, and a
// checkpoint can save state_dict() and load_state_dict() it into a fresh optimizer. Given the
// parameters' names, the state dict is keyed by name instead of position, so a checkpoint stays
// readable when the parameter list is cut differently (a sharded checkpoint maps names).
//
// Rounding: each rule's update is specified per element, with its fused multiply-adds written out
// (mul_add in optim/simd.h), and its vectorised pass gives bit for bit the result of its scalar
// reference loop; tests/optim/test_fused.cpp holds both to the formulas.
#pragma once
#include <cstdint>
#include <functional>
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

  // One update of every parameter that has a grad, each grad taken as multiplied by
  // `grad_factor` (rounded to its dtype) first: bit for bit what scaling the grads in place and
  // then stepping gives, without writing them. clip_grad_norm's scaling folds in here
  // (clip_coefficient in optim/clip.h), saving a read and a write of every grad.
  void step(double grad_factor = 1);
  // Drops every grad (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);  // takes effect at the next step(); negative → ValueError
  const std::vector<Tensor>& params() const { return params_; }
  const std::string& name() const { return name_; }

  // From now on keeps a copy of every parameter in `dtype` (bf16 or f16) equal to the parameter
  // converted to it: written now, then by every step() inside its pass, each slice of a
  // parameter converted right after it is updated, while it is still in cache. A mixed-precision
  // forward reads the copies instead of casting every weight again (ops/autocast.h,
  // AutocastCopies), which saves reading all f32 weights once more per step. A parameter changed
  // any other way than by step() needs another call.
  void keep_low_precision_copies(DType dtype);
  // Index-aligned with params(): views of one flat buffer, or the model's parameters under
  // keep_masters_of; empty unless copies are kept.
  const std::vector<Tensor>& low_precision_copies() const { return copies_; }

  // Master weights, the mixed-precision layout of the ZeRO paper: `model_params` (bf16 or f16
  // leaves that the model computes with and backward writes 16-bit grads to, index-aligned with
  // params() and of their shapes) become the copies, and params() the f32 master weights, which
  // no backward touches. step() reads each model parameter's grad, widened to f32 exactly, updates
  // the master and its state in f32 and writes the model parameter as its master rounded, in the
  // same pass; zero_grad() drops the model parameters' grads; the state (state(), state_dict())
  // carries the master as the buffer "master", so that a checkpoint resumes exactly. Bytes per
  // parameter: 2 (model) + 2 (grad) + 4 (master) + the rule's state (Adam: 8). The masters must
  // be f32; the model parameters are written from them now.
  void keep_masters_of(const std::vector<Tensor>& model_params);
  bool has_masters() const { return !grad_sources_.empty(); }

  // Parameter i's buffers, views of the live flat state (empty before its first update).
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
  // One parameter of this step's pass, as the rule's kernel sees it: `numel` contiguous elements
  // of `dtype` at `param` and `grad`, its buffers in buffer_names() order, and `step`, the count
  // of this update (1 on the first).
  struct Segment {
    void* param;
    const void* grad;
    std::vector<void*> buffers;
    int64_t numel;
    int64_t step;
    DType dtype;
    void* copy = nullptr;  // the low-precision copy for_each_slice writes, if kept
    DType copy_dtype = DType::bf16;
    DType grad_dtype = DType::f32;  // dtype, or the model parameter's 16-bit dtype under keep_masters_of
  };

  // fn(param, grad) with a value of each of the segment's element types: double and double, float
  // and float, or an f32 master's float and its model parameter's 16-bit grad type.
  template <typename Fn>
  static void visit_types(const Segment& s, Fn&& fn) {
    if (s.dtype == DType::f64) fn(double{}, double{});
    else if (s.grad_dtype == DType::bf16) fn(float{}, BFloat16{});
    else if (s.grad_dtype == DType::f16) fn(float{}, Half{});
    else fn(float{}, float{});
  }

  // The buffers the rule keeps per parameter, in the order update() receives them.
  virtual std::vector<std::string> buffer_names() const = 0;
  // Updates every segment in place, each grad multiplied by grad_factor (in its dtype) first;
  // one call per step(), which is expected to run its kernel through for_each_slice.
  virtual void update(const std::vector<Segment>& segments, double grad_factor) = 0;

  // Calls slice(segment index, begin, end) on element ranges that cover every segment once, and
  // after each writes the segment's copy over the range when it has one, from ONE parallel region: the segments' total is split evenly across the threads (a thread's
  // boundary falls on a multiple of 16 elements of its segment), so 148 tensors of a GPT cost one
  // fork and join, and a tiny bias costs no more than its elements. Below kParallelGrain
  // elements in all, one thread.
  static void for_each_slice(const std::vector<Segment>& segments,
                             const std::function<void(size_t, int64_t, int64_t)>& slice);

  // Throws ValueError naming this optimizer and `what` unless value >= 0 (NaN fails too).
  void check_non_negative(const char* what, double value) const;

 private:
  // A state entry checked against parameter i: its step and its buffers in buffer_names() order.
  struct CheckedState {
    size_t index;
    int64_t step;
    std::vector<Tensor> buffers;
  };
  // Each parameter's state-dict key: param_names, checked, or the indices.
  std::vector<std::string> state_keys(const std::vector<std::string>& param_names) const;
  // Checks `buffers` for parameter i, with `who` ("parameter 3", "parameter 'wte.weight'") in
  // its errors; writing it (write_state) cannot fail, so a load checks everything first.
  CheckedState check_state(size_t param_index, int64_t step, const NamedTensors& buffers, const std::string& who) const;
  void write_state(const CheckedState& s);
  // Allocates the flat buffers (zero-filled) if this is their first use.
  void ensure_flat_state();
  // Parameter i's slice of the flat buffer of buffer_names()[k].
  Tensor buffer_view(size_t param_index, size_t k) const;
  // What state(i) holds: buffer_names(), then "master" under keep_masters_of.
  std::vector<std::string> state_names() const;

  std::string name_;
  std::vector<Tensor> params_;
  std::vector<int64_t> steps_;
  // Per dtype (f64, f32), one flat tensor per buffer name (empty until first used), and each
  // parameter's element offset in its dtype's flat tensors.
  std::map<DType, std::vector<Tensor>> flat_;
  std::vector<int64_t> offsets_;
  std::vector<Tensor> copies_;
  std::vector<Tensor> grad_sources_;  // the model parameters under keep_masters_of, else empty
  double lr_;
};

}  // namespace weft::optim
