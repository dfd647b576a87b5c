// GradientBuckets: the bucket engine under every data-parallel reduction (DDP, ZeRO 1/2/3, a
// pipeline's replicas, local SGD's averaging). Tensors are copied into flat per-bucket buffers,
// and a bucket's collective is issued asynchronously (on the group's thread) once every one of
// its tensors is in, so that it runs while the rest are produced.
//
//   GradientBuckets buckets(params, reverse_order_buckets(params, bytes), group, {});
//   buckets.arm();                 // before the backward whose gradients are reduced
//   loss.backward();               // each final gradient copied in; a full bucket is issued
//   buckets.finish([&](size_t bucket, const Tensor& reduced) { ... });   // each bucket's result
//
// The collective is the options' (all-reduce with average, its 16-bit compression, or
// reduce-scatter to the rank's shard). Buckets are issued in bucket order only, the same on every
// rank, as a group's collectives must be: a bucket that is full waits for the ones before it. A
// tensor that is not in when finish() is called (a parameter that got no gradient in this pass,
// on this rank) contributes zeros, so it never stalls its bucket on the others.
//
// Without `hook_gradients` nothing is copied during backward: add() puts in what the caller has
// (local SGD's parameters), and reduce_gradients() does that for every parameter's .grad (a
// pipeline's gradients, summed over its micro-batches outside backward's hooks).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "weft/core/hooks.h"
#include "weft/dist/process_group.h"

namespace weft::dist {

// The parameters' indices cut into buckets of at most `bucket_bytes`, in reverse order (about the
// order backward finishes their gradients), one dtype per bucket; the first is at most 1 MiB, so
// that communication starts early in backward, and a parameter larger than a bucket is one alone.
std::vector<std::vector<size_t>> reverse_order_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes);

enum class BucketCollective {
  all_reduce,      // every rank gets the average of the whole buffer
  reduce_scatter,  // every rank gets the average of its 1/N of the buffer (ZeRO's shards)
};

struct GradientBucketOptions {
  BucketCollective collective = BucketCollective::all_reduce;
  std::optional<DType> compress = std::nullopt;  // all_reduce only: bf16 | f16 on the wire, sums in f32
  bool overlap = true;             // issue a bucket once full; else all of them in finish()
  bool hook_gradients = true;      // copy each parameter's gradient in as it becomes final
  bool drop_gradients = false;     // and then drop its .grad: no full gradient outlives its copy
  // Each tensor starts at a multiple of `align` elements; each buffer has a multiple of `pad_to`.
  int64_t align = 1;
  int64_t pad_to = 1;
  // Buffers allocated once and kept (their results stay readable until the next pass); else each
  // is allocated when its first tensor comes and dropped once reduced.
  bool keep_buffers = true;
  // Called when a bucket's last tensor is in (ZeRO-3 frees that layer's gathered parameters).
  std::function<void(size_t bucket)> filled = nullptr;
};

class GradientBuckets {
 public:
  // `members`: per bucket, indices into `params` (every one in exactly one bucket, of one dtype).
  GradientBuckets(std::vector<Tensor> params, const std::vector<std::vector<size_t>>& members, ProcessGroup& group,
                  GradientBucketOptions options);
  // Waits for whatever is still being reduced.
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // A pass begins: every bucket awaits all of its tensors.
  void arm();
  bool armed() const { return armed_; }
  // Copies `value` (of parameter `param`'s shape) into its bucket: once per parameter and pass.
  void add(size_t param, const Tensor& value);
  // Zeros for what is not in, issues what is left, and waits for each bucket in order, handing
  // `take` its result: the whole buffer (all-reduce) or the rank's shard of it (reduce-scatter).
  // A kept buffer's result stays valid until the next arm(); else it is dropped after `take`.
  void finish(const std::function<void(size_t bucket, const Tensor& result)>& take);
  // After backward, outside arm() and finish(): every parameter's .grad (an undefined one as zeros)
  // bucket by bucket, each bucket's collective run on the calling thread and its result handed to
  // `take` as finish() does.
  void reduce_gradients(const std::function<void(size_t bucket, const Tensor& result)>& take);

  size_t size() const { return buckets_.size(); }
  const std::vector<size_t>& params(size_t bucket) const { return buckets_[bucket].params; }
  int64_t numel(size_t bucket) const { return buckets_[bucket].numel; }
  DType dtype(size_t bucket) const { return buckets_[bucket].dtype; }
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }
  // Where parameter `param` starts in its bucket's buffer.
  int64_t offset(size_t param) const { return offset_[param]; }
  // The bytes a pass hands the collectives: every bucket, in its wire format (bf16 and f16 reduce
  // as f32 unless compressed).
  int64_t wire_bytes() const;
  // Buckets issued during the last pass before finish() was called.
  int64_t issued_before_finish() const { return issued_before_finish_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    int64_t numel = 0;
    DType dtype = DType::f32;
    Tensor flat;
    Tensor reduced;        // reduce_scatter: this rank's share
    int64_t pending = 0;   // tensors not yet in this pass
    Work work;
  };
  Bucket& buffered(size_t bucket);  // its buffer allocated (zeros) if it was not
  void gradient_ready(size_t param);
  void copy_in(size_t param, const Tensor& value);
  void count_in(size_t bucket);  // one more of its tensors is in
  void issue_ready_buckets();

  ProcessGroup& group_;
  GradientBucketOptions options_;
  std::vector<Tensor> params_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<int64_t> offset_;    // per parameter
  std::vector<bool> in_;           // per parameter, this pass
  std::vector<Bucket> buckets_;
  size_t next_to_issue_ = 0;
  bool armed_ = false;
  int64_t issued_before_finish_ = 0;
  std::vector<RemovableHandle> hooks_;
};

}  // namespace weft::dist
