// Autocast: mixed precision chosen per op, as torch.autocast. Inside an AutocastGuard(bf16 or
// f16), each op casts its floating inputs on entry as its entry in the op table says
// (monitor/op_table.h; docs/mixed-precision.md lists it):
//
//   lower  matmul, linear, conv2d, scaled_dot_product_attention: f32 inputs become the low type,
//          so the GEMMs run on oneDNN's AVX512-BF16 / AMX kernels; results stay low (attention's
//          fused kernel computes its scores and softmax in f32 and rounds its output once).
//   f32    softmax, log_softmax, exp, log, pow, sqrt, layer_norm, batch_norm, mse_loss, sum (and
//          so mean): 16-bit inputs become f32, because these need f32's range (exp, log, pow) or
//          add up many terms (norms, losses, reductions).
//   f32 inside  cross_entropy: 16-bit logits go in uncast; its kernel reads them into f32 and
//          accumulates in f32, returns an f32 loss and the logits' gradient in their dtype.
//
// Every other op runs in its inputs' dtype, and binary arithmetic on two floating dtypes promotes
// to the wider one (with or without autocast, as PyTorch's type promotion does).
//
// Invariants: each gradient arrives in its input's own dtype, so a parameter's .grad is f32 like
// the parameter (the f32 master weights the optimizer updates), even though the GEMM that
// produced it ran in the low type. The casts are recorded `to` ops, except for linear's operands
// (autocast_operand): linear records its backward against the tensors it was given and writes an
// f32 weight's and input's gradients out of the GEMMs in f32, instead of rounding them to bf16
// and casting them back (a GPT-2 124M step moved 1.5 GB through those casts). f64 tensors are never cast
// (they exist for gradient checks). The on/off state and AutocastGuard are per thread, in
// autograd/autocast_mode.h (checkpointing restores them for its recomputation).
#pragma once
#include <unordered_map>
#include <vector>

#include "weft/autograd/autocast_mode.h"
#include "weft/core/tensor.h"
#include "weft/monitor/op_table.h"

namespace weft {

// `t` as op `op` must see it under the current autocast state: t itself when autocast is off, t
// is undefined, not floating, f64, or already of the type the policy wants.
Tensor autocast(Op op, const Tensor& t);

// The same cast, not recorded: for an op that records its own backward against `t` and returns
// t's gradient in t's dtype. Under an AutocastCopies that holds a copy of t in the wanted dtype,
// that copy.
Tensor autocast_operand(Op op, const Tensor& t);

// Low-precision copies of tensors (parameters) that their owner keeps equal to the tensor cast
// to the copy's dtype (optim::Optimizer::keep_low_precision_copies writes them in its update
// pass). While one is alive on this thread, autocast_operand hands out the copy instead of
// casting the tensor again. The caller guarantees the copies stay current while it lives: the
// trainer holds one around a step's forward and backward, between two optimizer steps.
class AutocastCopies {
 public:
  // copies[i] is tensors[i]'s copy; an undefined copy, or empty lists, means none.
  AutocastCopies(const std::vector<Tensor>& tensors, const std::vector<Tensor>& copies);
  ~AutocastCopies();
  AutocastCopies(const AutocastCopies&) = delete;
  AutocastCopies& operator=(const AutocastCopies&) = delete;

  // t's copy in `dtype` under the innermost AutocastCopies of this thread, or null.
  static const Tensor* find(const Tensor& t, DType dtype);

 private:
  std::unordered_map<const TensorImpl*, Tensor> copies_;
  const AutocastCopies* enclosing_;
};

}  // namespace weft
