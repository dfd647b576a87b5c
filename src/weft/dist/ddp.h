// DistributedDataParallel: every rank keeps a whole copy of the model and computes gradients on its
// own slice of the batch; the ranks average the gradients (all-reduce) so that every copy takes
// the step one process would take on the whole batch.
//
//   dist::DistributedDataParallel ddp(*model, dist::ProcessGroup::world());  // rank 0's weights to all
//   ddp.prepare_backward(true);   // before the backward of a step's last micro-batch
//   loss.backward();              // each bucket's all-reduce starts as its last gradient becomes ready
//   ddp.finish_backward();        // waits for the rest: every .grad is now the average over ranks
//   optimizer.step();
//
// Micro-batches before the last (prepare_backward(false)) are not synchronised (PyTorch's
// no_sync): their gradients only accumulate locally.
//
// Buckets: the gradients go through GradientBuckets (dist/gradient_buckets.h), in
// reverse_order_buckets of bucket_bytes, each bucket all-reduced (avg) on the group's thread as
// soon as its last gradient is in, while backward goes on. After finish_backward each .grad is a
// view of its bucket, which the next backward overwrites: drop the gradients (zero_grad) before
// it, as the trainer does. A parameter that got no gradient in this pass (on this rank) contributes
// zeros, and its .grad becomes the average of what the other ranks had.
//
// With overlap off every bucket is issued in finish_backward(), after backward: what overlap buys
// is then measurable. With `compress` (bf16 or f16) each bucket travels in 16 bits, its sums taken
// in f32 (ProcessGroup's compressed all_reduce): half the bytes, for a rounding of each gradient.
//
// A pipeline's replicas reduce their gradients, summed over the micro-batches outside backward's
// hooks, with reduce_gradients() after the pipeline's flush: each bucket issued as it is packed.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "weft/dist/gradient_buckets.h"
#include "weft/dist/process_group.h"
#include "weft/nn/module.h"

namespace weft::dist {

// What a data-parallel wrapper does around each backward of a training step (DDP, ZeRO).
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Before a micro-batch's backward; `last_micro_batch` for the one after which the step updates.
  virtual void prepare_backward(bool last_micro_batch) = 0;
  // After that backward: the gradients the optimizer reads are the average over ranks.
  virtual void finish_backward() = 0;
  // This rank's pass failed before its synchronised backward finished (out of memory): issues the
  // step's remaining collectives with zeros for what this rank lacks, so that the other ranks are
  // not left waiting, and waits for them. The gradients are to be dropped.
  virtual void abandon_pass() = 0;
  // Whether `flag` holds on any rank (collective): how the ranks agree to redo a step.
  virtual bool on_any_rank(bool flag) = 0;
  // The gradients already in the parameters' .grad (a pipeline's, summed over its micro-batches
  // and between the tied table's stages, outside backward's hooks) reduced as a backward's are, as
  // prepare_backward(true), a backward and finish_backward() would.
  virtual void reduce_gradients() = 0;
};

struct DDPOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  bool overlap = true;
  std::optional<DType> compress;  // bf16 | f16 on the wire; none: the buckets' own dtype (bf16 and f16 as f32)
  // Each bucket allocated when its first gradient comes and each gradient dropped once copied in,
  // instead of buckets kept from step to step: beside the gradients a reduction then needs one
  // bucket, not a second copy of them (a pipeline's replicas, as weft plan counts them).
  bool transient_buckets = false;
};

class DistributedDataParallel : public GradientSync {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (blocking), then registers the hooks.
  DistributedDataParallel(nn::Module& model, ProcessGroup& group, DDPOptions options = {});
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void prepare_backward(bool last_micro_batch) override;
  void finish_backward() override;
  void abandon_pass() override;
  bool on_any_rank(bool flag) override;
  void reduce_gradients() override;

  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The bytes a synchronised step hands the all-reduces: every bucket, in its wire format. A ring
  // all-reduce sends 2 (N - 1) / N of them from each rank.
  int64_t all_reduced_bytes() const { return buckets_.wire_bytes(); }
  // Buckets whose all-reduce was issued during the last backward, before finish_backward().
  int64_t issued_during_backward() const { return buckets_.issued_before_finish(); }

 private:
  // Each parameter's .grad made a view of its bucket's all-reduced buffer.
  void take_bucket(size_t bucket, const Tensor& reduced);

  ProcessGroup& group_;
  std::vector<Tensor> params_;
  GradientBuckets buckets_;
  bool synchronising_ = false;  // this micro-batch's gradients are all-reduced
};

// Local SGD: every replica steps on its own gradients, from rank 0's parameters and buffers
// (broadcast, blocking, on construction), and every so many steps the replicas average their
// parameters: in buckets of `bucket_bytes`, each all-reduced while the next is packed.
class LocalSGD {
 public:
  LocalSGD(nn::Module& model, ProcessGroup& group, int64_t bucket_bytes);
  // Every parameter becomes its average over the ranks (collective).
  void average_parameters();

 private:
  std::vector<Tensor> params_;
  GradientBuckets buckets_;
};

}  // namespace weft::dist
