// ZeRO (Rajbhandari et al. 2020): data parallelism without the copies. Every rank still trains
// on its own slice of the batch, but owns only 1/N of what the optimizer keeps:
//
//   stage 1  the optimizer states are sharded; gradients all-reduced in full, as DDP does
//   stage 2  also the gradients: each bucket is reduce-scattered, a rank keeps its shard only
//   stage 3  also the parameters: a layer's are all-gathered just before its forward, freed
//            after it, gathered again just before its backward and freed once its gradients are in
//
//   dist::ZeroDataParallel zero(*model, group, {.stage = 2});   // rank 0's weights to all
//   auto optimizer = AdamW(zero.shards(), ...);   // the rank's shards are the optimizer's parameters
//   zero.prepare_backward(last_micro_batch);
//   loss.backward();                              // buckets reduce as their gradients become ready
//   zero.finish_backward();                       // every shard's .grad: the average over ranks
//   optimizer.step();
//   zero.finish_step();                           // stages 1, 2: the updated shards gathered to all
//
// Layout. The parameters are cut into buckets (stages 1 and 2: DDP's, about bucket_bytes each in
// reverse order; stage 3: one per layer, below) and each bucket's parameters are laid out in one
// flat buffer, each at a multiple of 16 elements, padded to a multiple of 16 N. Rank r owns the
// r-th of N equal slices of every bucket: its shard. The model's parameters become views of their
// bucket's buffer (the model computes with them unchanged), and the optimizer is built over the
// shards, one flat 1-D tensor per bucket, so its state is 1/N of one process's. Stages 1 and 2
// keep each bucket's whole buffer; stage 3 keeps only the shard and gives the buffer bytes only
// while the layer computes (Storage::resize_): the autograd graph's views of the weights then
// see the gathered bytes again in backward.
//
// Layers (stage 3): each child of the model's outermost Sequentials that has parameters (a GPT's
// blocks, a classifier's layers) is gathered by its own forward pre-hook and freed by its forward
// hook, which also puts an identity node on its output whose backward gathers it again; the
// parameters in no such child (a GPT's embeddings, which the output projection reads too, and its
// final norm) are one more bucket, gathered by the model's forward pre-hook and kept until its
// gradients are in. Activation checkpointing recomputes a block through the same hooks. Gathers
// are blocking (no prefetch of the next layer).
//
// Gradients go through GradientBuckets (dist/gradient_buckets.h), laid out as the parameters
// are: a grad-ready hook copies each final gradient into its bucket's flat gradient buffer and
// drops the parameter's .grad at once, so no full gradient outlives its copy; a bucket whose last
// gradient is in is reduced (averaged) asynchronously on the group's thread, in bucket order, as
// DDP's are: all-reduced under stage 1, reduce-scattered to each rank's shard under 2 and 3.
// Stage 1 all-reduces only the last micro-batch of --grad-accum (no_sync before); stages 2 and 3
// reduce-scatter every micro-batch and add the shards, so that no rank ever holds a full gradient
// for longer than a bucket. A parameter without a gradient in a pass adds zeros.
//
// Bytes per rank for Psi parameters (model states: parameters, gradients, optimizer states),
// Adam over f32 parameters (4 + 4 + 8), and with master weights (2 + 2 + 12, the paper's):
//   stage 1  4Psi + 4Psi + 8Psi/N    2Psi + 2Psi + 12Psi/N
//   stage 2  4Psi + 12Psi/N          2Psi + 14Psi/N
//   stage 3  16Psi/N                 16Psi/N
// plus the padding, a bucket's gradient buffer while it is reduced, and under stage 3 the layer
// being computed. docs/distributed.md has them measured.
//
// Every rank must build the same model, and call every method collectively in the same order.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weft/core/hooks.h"
#include "weft/dist/ddp.h"
#include "weft/dist/gradient_buckets.h"
#include "weft/dist/process_group.h"
#include "weft/nn/module.h"
#include "weft/optim/optimizer.h"

namespace weft::dist {

struct ZeroOptions {
  int stage = 1;  // 1, 2 or 3
  int64_t bucket_bytes = int64_t{25} << 20;  // stages 1 and 2
  bool overlap = true;  // reduce buckets during backward (else all after it)
};

class ZeroDataParallel : public GradientSync {
 public:
  // Lays the parameters out, broadcasts rank 0's parameters and buffers, registers the hooks.
  ZeroDataParallel(nn::Module& model, ProcessGroup& group, ZeroOptions options);
  ~ZeroDataParallel() override;
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // This rank's shard of each bucket, in the model's dtype: the optimizer's parameters (or the
  // tensors it keeps masters of). finish_backward sets their .grad.
  const std::vector<Tensor>& shards() const { return shards_; }
  // `per_param` (one tensor per model parameter, in model.parameters() order, of its shape) laid
  // out as the buckets are, and this rank's slice of each taken, in `dtype`. Local.
  std::vector<Tensor> shard(const std::vector<Tensor>& per_param, DType dtype) const;

  void prepare_backward(bool last_micro_batch) override;
  void finish_backward() override;
  // Stage 1 only (stages 2 and 3 reduce every micro-batch, and stage 3 gathers in forward, so a
  // failed pass would have all of those to replay): ValueError for the others, which weft train
  // refuses --auto-batch with.
  void abandon_pass() override;
  bool on_any_rank(bool flag) override;
  // After optimizer.step(): stages 1 and 2 all-gather the updated shards into every rank's
  // parameters; stage 3 has nothing to do (the shards are the parameters).
  void finish_step();
  // The L2 norm of the whole averaged gradient, from every rank's shard (collective).
  double grad_norm() const;
  // Per model parameter, the squared 2-norm of this rank's piece of its averaged gradient (0 where
  // the rank holds none of it). Local: the pieces' squares summed over the ranks are the
  // parameter's (a model split by tensor or pipeline parallelism weighs them, dist/split_model.h).
  std::vector<double> grad_squares() const;
  // Stage 1 only (stages 2 and 3 drop each gradient as backward finishes it): ValueError for the
  // others.
  void reduce_gradients() override;

  // Each rank takes its shards of one process's optimizer state (Optimizer::state_dict keyed by
  // `param_names`, one per model parameter) into `optimizer`, built over shards(). Local. A bucket
  // whose parameters are at different steps → ValueError.
  void load_full_state_dict(optim::Optimizer& optimizer, const std::map<std::string, Tensor>& dict,
                            const std::vector<std::string>& param_names) const;

  // A run of a parameter's elements (flattened) that one rank's shard holds: each rank holds at
  // most one run of each parameter.
  struct Piece {
    size_t param;    // index in model.parameters()
    int64_t begin;   // first element
    int64_t length;
  };
  std::vector<Piece> pieces(int rank) const;  // local: the layout is the same on every rank
  // This rank's pieces of the parameters and of their optimizer state (built over shards()), for a
  // sharded checkpoint: "NAME" (the run of the flattened parameter), "NAME.FIELD" (the same run of
  // each state buffer, "master" included), "NAME.step" (0-d) once the optimizer has stepped. Local.
  std::map<std::string, Tensor> local_state(const optim::Optimizer& optimizer,
                                            const std::vector<std::string>& param_names) const;
  // One process's optimizer state, keyed as Optimizer::state_dict by `param_names`, gathered from
  // every rank's shards (collective): what a rank that saves a whole model's share writes.
  std::map<std::string, Tensor> gather_state(const optim::Optimizer& optimizer,
                                             const std::vector<std::string>& param_names) const;

  // Stage 3: every parameter gathered (to read or write them whole: a checkpoint), until
  // release_parameters(), which first writes each rank's shard back from them. Other stages: nothing.
  void gather_parameters();
  void release_parameters();

  int rank() const { return group_.rank(); }
  int ranks() const { return group_.size(); }
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  // A bucket's flat parameters: their bytes (stage 3: only while gathered) and, under stage 3, the
  // reasons to keep them gathered (0: freed).
  struct FlatParameters {
    Storage storage;
    int64_t gathered = 0;
  };
  // Of a bucket's buffer, whose elements are a multiple of 16 * ranks.
  int64_t shard_numel(size_t bucket) const { return buckets_.numel(bucket) / group_.size(); }
  // Where `piece` (of this rank) starts in its bucket's shard.
  int64_t offset_in_shard(const Piece& piece) const;
  Tensor flat(size_t bucket) const;  // the whole buffer, as a 1-D tensor
  void lay_out();
  void add_layer_hooks(nn::Module& model);
  void gather(size_t bucket);   // stage 3
  void release(size_t bucket);  // stage 3
  // The bucket's reduced gradients (stage 1: the whole buffer; 2, 3: this rank's shard of it) into
  // its shard's .grad.
  void take_bucket(size_t bucket, const Tensor& reduced);

  ProcessGroup& group_;
  ZeroOptions options_;
  std::vector<Tensor> params_;
  GradientBuckets buckets_;
  std::vector<FlatParameters> flat_params_;  // per bucket
  std::vector<Tensor> shards_;               // per bucket
  std::vector<RemovableHandle> hooks_;
};

}  // namespace weft::dist
