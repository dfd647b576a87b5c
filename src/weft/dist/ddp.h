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
// Buckets: reverse_order_buckets of bucket_bytes. A grad-ready hook copies each final gradient into its bucket's flat buffer;
// when a bucket's last gradient is in, its all-reduce (avg) is issued asynchronously, so it runs
// on the group's thread while backward goes on. Buckets are issued in bucket order only, the same
// on every rank, as a group's collectives must be: a bucket that is ready waits for the ones
// before it. After finish_backward each .grad is a view of its bucket, which the
// next backward overwrites: drop the gradients (zero_grad) before it, as the trainer does. A parameter that got no gradient in this pass (on this rank) contributes zeros:
// finish_backward() fills those in and issues what is left, so an unused parameter never stalls
// its bucket, and its .grad becomes the average of what the other ranks had.
//
// With overlap off every bucket is issued in finish_backward(), after backward: what overlap buys
// is then measurable. With `compress` (bf16 or f16) each bucket travels in 16 bits, its sums taken
// in f32 (ProcessGroup's compressed all_reduce): half the bytes, for a rounding of each gradient.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "weft/core/hooks.h"
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
};

// The parameters' indices cut into buckets of at most `bucket_bytes`, in reverse order (about the
// order backward finishes their gradients), one dtype per bucket; the first is at most 1 MiB, so
// that communication starts early in backward, and a parameter larger than a bucket is one alone.
std::vector<std::vector<size_t>> reverse_order_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes);

struct DDPOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  bool overlap = true;
  std::optional<DType> compress;  // bf16 | f16 on the wire; none: the buckets' own dtype (bf16 and f16 as f32)
};

class DistributedDataParallel : public GradientSync {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (blocking), then registers the hooks.
  DistributedDataParallel(nn::Module& model, ProcessGroup& group, DDPOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void prepare_backward(bool last_micro_batch) override;
  void finish_backward() override;
  void abandon_pass() override;
  bool on_any_rank(bool flag) override;

  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The bytes a synchronised step hands the all-reduces: every bucket, in its wire format. A ring
  // all-reduce sends 2 (N - 1) / N of them from each rank.
  int64_t all_reduced_bytes() const;
  // Buckets whose all-reduce was issued during the last backward, before finish_backward().
  int64_t issued_during_backward() const { return issued_during_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;    // indices into params_
    std::vector<int64_t> offsets;  // each one's first element in flat
    Tensor flat;
    int64_t pending = 0;           // gradients not yet copied in this pass
    Work work;
  };
  void gradient_ready(size_t param);
  void issue_ready_buckets();

  ProcessGroup& group_;
  DDPOptions options_;
  std::vector<Tensor> params_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<bool> copied_;       // per parameter, this pass
  std::vector<Bucket> buckets_;
  size_t next_to_issue_ = 0;
  bool armed_ = false;
  bool synchronising_ = false;  // this micro-batch's gradients are all-reduced
  int64_t issued_during_backward_ = 0;
  std::vector<RemovableHandle> hooks_;
};

}  // namespace weft::dist
