// ActivationTape: one training step's forward pass as weft's autograd records it, reduced to what
// costs memory (which tensors each op creates, which it keeps for its backward, what it needs only
// while it runs), and a replay of the whole step (forward, then backward in reverse order) under the
// engine's lifetime rules. Its high-water mark is the step's activation memory, or, told what lives
// beside the activations (States: parameters and optimizer state, gradients as the loop keeps
// them), the peak of the whole step.
//
// What is counted is storage, not tensors: a view shares its base's storage, and a storage lives
// while anything refers to it:
//   - the forward pass, until the value's last reader has run;
//   - an op that saved it, until that op's backward has run (weft frees saved tensors as soon as a
//     node has run, autograd.md);
//   - the caller, for the whole step (the batch and targets; the logits and loss when the loop keeps
//     them, as weft's trainer does to count correct predictions);
//   - a gradient slot, from the backward that produced it until the backward of the value's
//     producer has run.
// An op's backward, as weft's engine runs it: the gradients of its outputs are alive; it allocates
// its inputs' gradients and its scratch; it drops what it saved; it adds each input gradient into
// that input's slot (a second contribution allocates the sum, as the engine's accumulate() does);
// then the gradients of its outputs are dropped. Every tensor counts what the caching allocator hands
// out for it (fresh_block_bytes, core/allocator.h: multiples of 512 bytes, whole 2 MiB segments for
// some large ones).
//
// Activation checkpointing: ops recorded between begin_segment() and end_segment() keep nothing
// for backward during the forward; the segment's input is kept instead, and when the backward
// reaches the segment its forward is run again (saving, this time) just before its backward.
//
// Invariants: values are recorded in forward order and every value an op reads was recorded
// before it; segments do not nest; replay() ends with only the caller's tensors alive.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::memory {

class ActivationTape {
 public:
  using Value = int;

  // What an op's backward hands its input: nothing (the input needs no gradient: the batch, a
  // mask), a new tensor of the input's size, or the output's gradient itself (views, additions:
  // no allocation).
  enum class Grad { none, fresh, forwarded };

  struct Op {
    std::string name{};
    std::vector<Value> inputs{};
    std::vector<Grad> grads{};        // one per input
    int64_t output_bytes = 0;         // a view's own size (its gradient's), though it allocates nothing
    bool view = false;                // the output shares inputs[0]'s storage
    std::vector<Value> saved{};       // inputs kept for the backward
    bool saves_output = false;
    int64_t saved_extra_bytes = 0;    // made by the forward for the backward only (statistics, pooling workspace)
    int64_t forward_scratch_bytes = 0;
    int64_t backward_scratch_bytes = 0;
    // Parameters whose gradients this op's backward produces (a tied weight counts at the op whose
    // backward runs first).
    int64_t param_grads = 0;
  };

  // A tensor made before the forward that lives through the step (the batch, the targets).
  Value input(int64_t bytes);
  Value record(Op op);
  // The caller keeps `value` until the step ends.
  void hold(Value value);
  void begin_segment();
  void end_segment();

  // What lives beside the activations. Parameters and optimizer state are resident; gradients
  // are resident during the forward when the loop clears them only after it (forward, zero_grad,
  // backward, step), are freed by that zero_grad, and come back op by op as the backward produces
  // them. weft's trainer clears them before the forward (grads_alive_in_forward false).
  struct States {
    int64_t resident_bytes = 0;
    double grad_bytes_per_param = 0;
    bool grads_alive_in_forward = true;
  };
  // The high-water mark of the step. The loss is the last value recorded: the backward starts from it.
  struct Peak {
    int64_t bytes = 0;
    std::string where;  // "backward of relu (op 4 of 10)"
  };
  Peak replay(const States& states) const;
  Peak replay() const;  // the activations alone: no states
  // The forward alone under NoGradGuard (inference): no op keeps anything for a backward and no
  // segment holds its input, so a value lives until its last reader has run (or, held, to the end).
  Peak forward_peak() const;

  // Bytes alive when the forward has finished and before the backward starts: the inputs, what
  // the ops saved (or the segment inputs, with checkpointing) and what the caller holds.
  int64_t bytes_after_forward() const;

  int64_t bytes(Value value) const;
  size_t size() const { return ops_.size(); }

 private:
  struct ValueInfo {
    int64_t bytes;
    int storage;  // index into storage_bytes_
    int producer; // op index, -1 for inputs
  };
  struct Segment {
    int first_op, last_op;
  };
  friend class Replay;

  std::vector<Op> ops_;
  std::vector<ValueInfo> values_;
  std::vector<int64_t> storage_bytes_;
  std::vector<Value> inputs_, held_;
  std::vector<Segment> segments_;
  int open_segment_ = -1;  // the first op of the segment being recorded, or -1
};

}  // namespace weft::memory
