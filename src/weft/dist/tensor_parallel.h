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
// The token embedding splits by vocabulary (VocabParallelEmbedding): each rank holds vocab/N rows,
// looks up the ids among them, and the sum over the ranks is every id's row; as the tied output
// projection it gives the rank's vocab/N logits, which vocab_parallel_cross_entropy takes.
// parallelize_gpt puts all of these into a GPT.
//
// All are built from the whole layer (every rank builds the same one: the same seed) and take the
// rank's slice of its weight and bias, so a split model starts where the whole one does. Sizes the
// group does not divide → ValueError.
#pragma once
#include <map>
#include <string>

#include "weft/dist/process_group.h"
#include "weft/nn/gpt.h"
#include "weft/nn/linear.h"
#include "weft/nn/module.h"
#include "weft/ops/loss.h"

namespace weft::dist {

// Where a rank's slice lies in the whole tensor, flattened: `count` blocks of `length` elements, the
// first at `begin`, each next `stride` further; the slice holds them in that order.
struct Slice {
  int64_t begin = 0, length = 0, count = 1, stride = 0;
};

// How a parameter is split over the ranks of a tensor-parallel group.
struct Split {
  int dim = 0;        // 0: by rows (output features, vocabulary); 1: by columns (input features), 2-D only
  int64_t parts = 1;  // dim 0: the rows hold `parts` tensors one after another (c_attn's q, k, v), each split alike
  Shape local_shape(const Shape& whole, int ranks) const;
  Slice slice(const Shape& whole, int rank, int ranks) const;
};
// The rank's slice of `whole` (any layout), as a new contiguous [count * length] tensor.
Tensor take_slice(const Tensor& whole, const Slice& slice);

// A tensor-parallel model's split parameters, by name, with their whole shapes; a parameter not
// named is whole on every rank (the norms, the row-parallel biases, the position embedding).
struct ShardedParameter {
  Shape whole;
  Split split;
};
using TensorParallelLayout = std::map<std::string, ShardedParameter>;

// A state dict of the whole model (or an optimizer's, keyed "NAME.FIELD" with tensors of NAME's
// shape; 0-d values as they are) -> this rank's: every split tensor replaced by its slice.
std::map<std::string, Tensor> slice_state_dict(const std::map<std::string, Tensor>& whole,
                                               const TensorParallelLayout& layout, int rank, int ranks);

Tensor copy_to_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor reduce_from_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor scatter_to_parallel_region(const Tensor& x, ProcessGroup& group);
Tensor gather_from_parallel_region(const Tensor& x, ProcessGroup& group);

// Cross-entropy, the mean over rows, of logits split by vocabulary: the rank holds logits
// [rows, V / N] for the ids [rank V / N, (rank + 1) V / N), and the targets [rows] (i64, ids in
// [0, V)) whole. No rank ever holds a row's full logits: the row's max, its sum of exponentials and
// its target's logit are each one all-reduce of `rows` values. Every rank gets the same loss (the
// mean over rows, or with Reduction::sum the sum); the gradient is the rank's slice of
// (softmax - one-hot) / rows (without the / rows for the sum). Any floating dtype, computed in f64.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, ProcessGroup& group,
                                    Reduction reduction = Reduction::mean);

class ColumnParallelLinear : public nn::Module {
 public:
  // y = x W^T + b with the rank's rows of W [out / N, in] and of b; gather_output: all-gather the
  // outputs into [..., out] on every rank, else each keeps its [..., out / N]. parts > 1: the
  // outputs are `parts` tensors side by side, each split alike (the rank's q, k and v rows of a
  // fused attention projection), and the rank's outputs are its share of each, side by side.
  ColumnParallelLinear(const nn::Linear& whole, ProcessGroup& group, bool gather_output, int64_t parts = 1);
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

class VocabParallelEmbedding : public nn::Embedding {
 public:
  // The rank's rows [vocab / N, dim] of the whole table: ids [first, first + vocab / N).
  VocabParallelEmbedding(const nn::Embedding& whole, ProcessGroup& group);
  // ids -> [..., dim]: the rank's rows for its ids, zeros for the rest, summed over the ranks
  // (reduce_from). An id outside [0, vocab) → IndexError.
  Tensor forward(const Tensor& ids) override;
  // x [..., dim] -> the rank's logits [..., vocab / N] (copy_to first: x's gradient sums the ranks').
  Tensor attend(const Tensor& x) override;
  std::shared_ptr<nn::Embedding> with_copied_table() const override;

  const int64_t first, vocab;

 private:
  VocabParallelEmbedding(Tensor rows, int64_t first, int64_t vocab, ProcessGroup& group);
  ProcessGroup& group_;
};

// A GPT made tensor parallel in place (Megatron-LM's layout): in every block, attention's c_attn
// column-parallel with each rank taking its heads' q, k and v rows, c_proj row-parallel; the MLP's
// c_fc column-, c_proj row-parallel; wte vocabulary-parallel, and with it the tied output
// projection, so the model's output is the rank's logits [B, T, vocab / N] (feed them to
// vocab_parallel_cross_entropy). Two all-reduces per block forward, two backward. Heads or
// vocabulary that the group does not divide → ValueError naming --tp.
TensorParallelLayout parallelize_gpt(nn::GPT& model, ProcessGroup& group);

}  // namespace weft::dist
