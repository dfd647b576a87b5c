// Tensor parallelism (Megatron-LM): a Linear layer's weight split across the ranks of a group, each
// rank computing its slice. The communication is four forward/backward pairs, called where it
// happens, as Megatron names them:
//
//   copy_to_parallel_region      forward: identity               backward: all-reduce (sum)
//   reduce_from_parallel_region  forward: all-reduce (sum)       backward: identity
//   scatter_to_parallel_region   forward: this rank's slice of   backward: all-gather along it
//                                the last dim
//   gather_from_parallel_region  forward: all-gather along the   backward: this rank's slice
//                                last dim
//
// ColumnParallelLinear splits the weight by output rows: each rank holds out/N rows and computes
// out/N outputs from the whole input (copy_to first, so that the input's gradient is summed over
// the ranks), and gathers the outputs only when asked. RowParallelLinear splits it by input
// columns: each rank multiplies its in/N inputs (already split, or scattered here) by its columns,
// the partial outputs are summed (reduce_from), and the bias is added once, after. Column then Row
// is a transformer MLP with one all-reduce in the forward and one in the backward.
//
// The output projection's vocabulary split the same way feeds vocab_parallel_cross_entropy.
//
// Both are built from the whole layer (every rank builds the same one: the same seed) and take the
// rank's slice of its weight and bias, so a split model starts where the whole one does. Sizes the
// group does not divide → ValueError.
#pragma once
#include "weft/dist/process_group.h"
#include "weft/nn/linear.h"
#include "weft/nn/module.h"

namespace weft::dist {

Tensor copy_to_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor reduce_from_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor scatter_to_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor gather_from_parallel_region(const Tensor& x, ProcessGroup& group);

// Cross-entropy, the mean over rows, of logits split by vocabulary: the rank holds logits
// [rows, V / N] for the ids [rank V / N, (rank + 1) V / N), and the targets [rows] (i64, ids in
// [0, V)) whole. No rank ever holds a row's full logits: the row's max, its sum of exponentials and
// its target's logit are each one all-reduce of `rows` values. Every rank gets the same loss; the
// gradient is the rank's slice of (softmax - one-hot) / rows. f32 or f64, computed in f64.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, ProcessGroup& group);

class ColumnParallelLinear : public nn::Module {
 public:
  // y = x W^T + b with the rank's rows of W [out / N, in] and of b; gather_output: all-gather the
  // outputs into [..., out] on every rank, else each keeps its [..., out / N].
  ColumnParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool gather_output);
  Tensor forward(const Tensor& x) override;

  Tensor weight, bias;  // the rank's slices; bias undefined when the layer has none

 private:
  ProcessGroup& group_;
  bool gather_output_;
};

class RowParallelLinear : public nn::Module {
 public:
  // y = sum over ranks of x_r W_r^T, + b once: W_r [out, in / N] the rank's columns.
  // input_is_parallel: x is already the rank's [..., in / N] (a ColumnParallelLinear's output),
  // else it is [..., in] and the rank takes its slice.
  RowParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool input_is_parallel);
  Tensor forward(const Tensor& x) override;

  Tensor weight, bias;  // bias whole, on every rank

 private:
  ProcessGroup& group_;
  bool input_is_parallel_;
};

}  // namespace weft::dist
