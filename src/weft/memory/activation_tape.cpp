#include "weft/memory/activation_tape.h"

#include <algorithm>

#include "weft/core/allocator.h"
#include "weft/core/error.h"

namespace weft::memory {

ActivationTape::Value ActivationTape::input(int64_t bytes) {
  WEFT_CHECK(ops_.empty(), ValueError, "ActivationTape: inputs must be declared before the first op");
  WEFT_CHECK(bytes > 0, ValueError, "ActivationTape: an input of ", bytes, " bytes");
  const Value v = static_cast<Value>(values_.size());
  values_.push_back({bytes, static_cast<int>(storage_bytes_.size()), -1});
  storage_bytes_.push_back(bytes);
  inputs_.push_back(v);
  return v;
}

ActivationTape::Value ActivationTape::record(Op op) {
  WEFT_CHECK(op.grads.size() == op.inputs.size(), ValueError, "ActivationTape: op ", op.name, " has ",
             op.inputs.size(), " inputs but ", op.grads.size(), " gradient rules");
  WEFT_CHECK(!op.view || !op.inputs.empty(), ValueError, "ActivationTape: view ", op.name, " has no input");
  for (Value v : op.inputs)
    WEFT_CHECK(v >= 0 && v < static_cast<Value>(values_.size()), ValueError, "ActivationTape: op ", op.name,
               " reads value ", v, ", which was not recorded");
  for (Value v : op.saved)
    WEFT_CHECK(std::find(op.inputs.begin(), op.inputs.end(), v) != op.inputs.end(), ValueError,
               "ActivationTape: op ", op.name, " saves value ", v, ", which is not one of its inputs");
  const Value v = static_cast<Value>(values_.size());
  const int op_index = static_cast<int>(ops_.size());
  WEFT_CHECK(op.output_bytes > 0, ValueError, "ActivationTape: op ", op.name, " makes an output of ",
             op.output_bytes, " bytes");
  if (op.view) {
    values_.push_back({op.output_bytes, values_[op.inputs[0]].storage, op_index});
  } else {
    values_.push_back({op.output_bytes, static_cast<int>(storage_bytes_.size()), op_index});
    storage_bytes_.push_back(op.output_bytes);
  }
  ops_.push_back(std::move(op));
  return v;
}

void ActivationTape::hold(Value value) {
  WEFT_CHECK(value >= 0 && value < static_cast<Value>(values_.size()) && values_[value].producer >= 0, ValueError,
             "ActivationTape: hold(", value, ") of a value that no op made (inputs are held already)");
  held_.push_back(value);
}

int64_t ActivationTape::bytes(Value value) const {
  WEFT_CHECK(value >= 0 && value < static_cast<Value>(values_.size()), ValueError, "ActivationTape: value ", value,
             " was not recorded");
  return values_[value].bytes;
}

void ActivationTape::begin_segment() {
  WEFT_CHECK(open_segment_ < 0, ValueError, "ActivationTape: segments do not nest");
  open_segment_ = static_cast<int>(ops_.size());
}

void ActivationTape::end_segment() {
  WEFT_CHECK(open_segment_ >= 0, ValueError, "ActivationTape: end_segment() without begin_segment()");
  WEFT_CHECK(static_cast<int>(ops_.size()) > open_segment_, ValueError, "ActivationTape: an empty segment");
  segments_.push_back({open_segment_, static_cast<int>(ops_.size()) - 1});
  open_segment_ = -1;
}

// One replay of the step: reference counts per storage, the bytes alive, and the high-water mark.
class Replay {
 public:
  Replay(const ActivationTape& tape, const ActivationTape::States& states)
      : tape_(tape), states_(states), storage_bytes_(tape.storage_bytes_), refs_(storage_bytes_.size(), 0),
        grad_slot_(tape.values_.size(), -1), segment_of_(tape.ops_.size(), -1) {
    for (size_t s = 0; s < tape.segments_.size(); ++s)
      for (int i = tape.segments_[s].first_op; i <= tape.segments_[s].last_op; ++i)
        segment_of_[i] = static_cast<int>(s);
    for (const ActivationTape::Op& op : tape.ops_)
      extra_storage_.push_back(op.saved_extra_bytes > 0 ? new_storage(op.saved_extra_bytes) : -1);
    segment_inputs_.resize(tape.segments_.size());
    for (size_t s = 0; s < tape.segments_.size(); ++s) {
      const auto& seg = tape.segments_[s];
      for (int i = seg.first_op; i <= seg.last_op; ++i)
        for (ActivationTape::Value v : tape.ops_[i].inputs) {
          const int producer = tape.values_[v].producer;
          std::vector<int>& storages = segment_inputs_[s];
          const int storage = tape.values_[v].storage;
          if (producer < seg.first_op && std::find(storages.begin(), storages.end(), storage) == storages.end())
            storages.push_back(storage);
        }
    }
  }

  void forward(bool no_grad = false) {
    no_grad_ = no_grad;
    for (ActivationTape::Value v : tape_.inputs_) acquire(tape_.values_[v].storage);
    if (states_.grads_alive_in_forward) {
      int64_t params = 0;
      for (const ActivationTape::Op& op : tape_.ops_) params += op.param_grads;
      grad_bytes_ = static_cast<double>(params) * states_.grad_bytes_per_param;
    }
    note("before the forward");
    run_forward(0, static_cast<int>(tape_.ops_.size()) - 1, "forward of ");
  }

  void backward() {
    const int n = static_cast<int>(tape_.ops_.size());
    if (n == 0) return;
    grad_bytes_ = 0;  // zero_grad (set to none) between the forward and the backward
    const ActivationTape::Value loss = static_cast<ActivationTape::Value>(tape_.values_.size()) - 1;
    grad_slot_[loss] = new_storage(tape_.values_[loss].bytes);
    acquire(grad_slot_[loss]);
    for (int i = n - 1; i >= 0; --i) {
      const int s = segment_of_[i];
      if (s >= 0 && tape_.segments_[s].last_op == i) run_forward(tape_.segments_[s].first_op, i, "recompute of ", true);
      backward_of(i);
      if (s >= 0 && tape_.segments_[s].first_op == i)
        for (int storage : segment_inputs_[s]) release(storage);
    }
    for (int& slot : grad_slot_)
      if (slot >= 0) {
        release(slot);
        slot = -1;
      }
    note("optimizer step");
  }

  int64_t live() const { return live_; }
  const ActivationTape::Peak& peak() const { return peak_; }

 private:
  int new_storage(int64_t bytes) {
    storage_bytes_.push_back(bytes);
    refs_.push_back(0);
    return static_cast<int>(storage_bytes_.size()) - 1;
  }
  void acquire(int storage) {
    if (refs_[storage]++ == 0) live_ += fresh_block_bytes(storage_bytes_[storage]);
  }
  void release(int storage) {
    WEFT_CHECK(refs_[storage] > 0, Error, "ActivationTape: storage ", storage, " released more often than acquired");
    if (--refs_[storage] == 0) live_ -= fresh_block_bytes(storage_bytes_[storage]);
  }
  void note(const std::string& where, int64_t transient = 0) {
    const int64_t total = states_.resident_bytes + static_cast<int64_t>(grad_bytes_) + live_ + transient;
    if (total > peak_.bytes) peak_ = {total, where};
  }
  std::string describe(const char* phase, int i) const {
    return str(phase, tape_.ops_[i].name, " (op ", i + 1, " of ", tape_.ops_.size(), ")");
  }

  // The forward of ops [first, last]. A checkpointed segment keeps nothing for the backward during
  // the first forward (its inputs are held instead); `recompute` is its second run, which saves.
  void run_forward(int first, int last, const char* phase, bool recompute = false) {
    std::vector<int> last_reader(tape_.values_.size(), -1);
    for (int i = first; i <= last; ++i)
      for (ActivationTape::Value v : tape_.ops_[i].inputs) last_reader[v] = i;
    for (int i = first; i <= last; ++i) {
      const ActivationTape::Op& op = tape_.ops_[i];
      const int s = segment_of_[i];
      if (!no_grad_ && !recompute && s >= 0 && tape_.segments_[s].first_op == i)
        for (int storage : segment_inputs_[s]) acquire(storage);
      const bool saves = !no_grad_ && (recompute || s < 0);
      const ActivationTape::Value out = output_of(i);
      acquire(tape_.values_[out].storage);
      if (!recompute && std::find(tape_.held_.begin(), tape_.held_.end(), out) != tape_.held_.end())
        acquire(tape_.values_[out].storage);
      note(describe(phase, i), op.forward_scratch_bytes > 0 ? fresh_block_bytes(op.forward_scratch_bytes) : 0);
      if (saves) {
        for (ActivationTape::Value v : op.saved) acquire(tape_.values_[v].storage);
        if (op.saves_output) acquire(tape_.values_[out].storage);
        if (extra_storage_[i] >= 0) acquire(extra_storage_[i]);
        note(describe(phase, i));
      }
      std::vector<ActivationTape::Value> done;
      for (ActivationTape::Value v : op.inputs)
        if (last_reader[v] == i && tape_.values_[v].producer >= first &&
            std::find(done.begin(), done.end(), v) == done.end()) {
          done.push_back(v);
          release(tape_.values_[v].storage);
        }
      if (last_reader[out] < 0) release(tape_.values_[out].storage);
    }
  }

  ActivationTape::Value output_of(int op_index) const {
    // Values are recorded in order: the inputs first, then one output per op.
    return static_cast<ActivationTape::Value>(tape_.inputs_.size()) + op_index;
  }

  void backward_of(int i) {
    const ActivationTape::Op& op = tape_.ops_[i];
    const ActivationTape::Value out = output_of(i);
    const int out_grad = grad_slot_[out];
    std::vector<int> grads(op.inputs.size(), -1);
    if (out_grad >= 0) {
      grad_bytes_ += static_cast<double>(op.param_grads) * states_.grad_bytes_per_param;
      for (size_t j = 0; j < op.inputs.size(); ++j) {
        if (op.grads[j] == ActivationTape::Grad::fresh) {
          grads[j] = new_storage(tape_.values_[op.inputs[j]].bytes);
          acquire(grads[j]);
        } else if (op.grads[j] == ActivationTape::Grad::forwarded) {
          grads[j] = out_grad;
          acquire(out_grad);
        }
      }
      note(describe("backward of ", i), op.backward_scratch_bytes > 0 ? fresh_block_bytes(op.backward_scratch_bytes) : 0);
    }
    release_saved(i);
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      if (grads[j] < 0) continue;
      int& slot = grad_slot_[op.inputs[j]];
      if (slot < 0) {
        slot = grads[j];
        continue;
      }
      const int sum = new_storage(tape_.values_[op.inputs[j]].bytes);
      acquire(sum);
      note(describe("backward of ", i));
      release(slot);
      release(grads[j]);
      slot = sum;
    }
    if (out_grad >= 0) {
      release(out_grad);
      grad_slot_[out] = -1;
    }
  }

  void release_saved(int i) {
    const ActivationTape::Op& op = tape_.ops_[i];
    for (ActivationTape::Value v : op.saved) release(tape_.values_[v].storage);
    if (op.saves_output) release(tape_.values_[output_of(i)].storage);
    if (extra_storage_[i] >= 0) release(extra_storage_[i]);
  }

  const ActivationTape& tape_;
  const ActivationTape::States states_;
  std::vector<int64_t> storage_bytes_;
  std::vector<int> refs_;
  std::vector<int> grad_slot_;   // per value: the storage of its gradient, or -1
  std::vector<int> segment_of_;  // per op: its segment, or -1
  std::vector<int> extra_storage_;
  std::vector<std::vector<int>> segment_inputs_;  // per segment: storages it reads from before it
  bool no_grad_ = false;  // the forward keeps nothing for a backward
  int64_t live_ = 0;     // activation bytes alive
  double grad_bytes_ = 0;  // parameter gradients alive
  ActivationTape::Peak peak_;
};

ActivationTape::Peak ActivationTape::replay(const States& states) const {
  WEFT_CHECK(open_segment_ < 0, ValueError, "ActivationTape: replay() inside an open segment");
  Replay r(*this, states);
  r.forward();
  r.backward();
  return r.peak();
}

ActivationTape::Peak ActivationTape::replay() const { return replay(States{.grad_bytes_per_param = 0}); }

ActivationTape::Peak ActivationTape::forward_peak() const {
  WEFT_CHECK(open_segment_ < 0, ValueError, "ActivationTape: forward_peak() inside an open segment");
  Replay r(*this, States{.grads_alive_in_forward = false});
  r.forward(/*no_grad=*/true);
  return r.peak();
}

int64_t ActivationTape::bytes_after_forward() const {
  WEFT_CHECK(open_segment_ < 0, ValueError, "ActivationTape: bytes_after_forward() inside an open segment");
  Replay r(*this, States{});
  r.forward();
  return r.live();
}

}  // namespace weft::memory
