#include "weft/dist/gradient_buckets.h"

#include <algorithm>

#include "weft/autograd/grad_mode.h"

namespace weft::dist {

namespace {

constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

std::vector<std::vector<size_t>> reverse_order_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes) {
  WEFT_CHECK(bucket_bytes > 0, ValueError, "bucket size must be positive, got ", bucket_bytes);
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t size = params[k].nbytes();
    // The first bucket is small (as PyTorch's DDP makes it): its all-reduce starts as soon as the
    // last layers' gradients are in, instead of after a quarter of backward.
    const int64_t cap = buckets.size() == 1 ? std::min(bucket_bytes, kFirstBucketBytes) : bucket_bytes;
    if (buckets.empty() || bytes + size > cap || params[buckets.back().front()].dtype() != params[k].dtype()) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += size;
  }
  return buckets;
}

GradientBuckets::GradientBuckets(std::vector<Tensor> params, const std::vector<std::vector<size_t>>& members,
                                 ProcessGroup& group, GradientBucketOptions options)
    : group_(group), options_(std::move(options)), params_(std::move(params)) {
  WEFT_CHECK(options_.collective == BucketCollective::all_reduce || !options_.compress, ValueError,
             "gradient buckets: only an all-reduce is compressed");
  bucket_of_.resize(params_.size());
  offset_.resize(params_.size());
  in_.assign(params_.size(), false);
  for (const std::vector<size_t>& m : members) {
    Bucket& b = buckets_.emplace_back();
    b.dtype = params_[m.front()].dtype();
    for (size_t k : m) {
      WEFT_CHECK(params_[k].dtype() == b.dtype, DTypeError, "gradient buckets: one bucket in two dtypes (",
                 dtype_name(b.dtype), ", ", dtype_name(params_[k].dtype()), ")");
      b.params.push_back(k);
      bucket_of_[k] = buckets_.size() - 1;
      offset_[k] = b.numel;
      b.numel += round_up(params_[k].numel(), options_.align);
    }
    b.numel = round_up(b.numel, options_.pad_to);
    if (options_.keep_buffers) b.flat = Tensor::zeros({b.numel}, b.dtype);
  }
  if (!options_.hook_gradients) return;
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_grad_ready_hook([this, k](const Tensor&) { gradient_ready(k); }));
}

GradientBuckets::~GradientBuckets() {
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (const Error&) {  // a failed collective was reported by finish() already
    }
  }
  for (RemovableHandle& hook : hooks_) hook.remove();
}

void GradientBuckets::arm() {
  for (Bucket& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  std::fill(in_.begin(), in_.end(), false);
  next_to_issue_ = 0;
  issued_before_finish_ = 0;
  armed_ = true;
}

GradientBuckets::Bucket& GradientBuckets::buffered(size_t bucket) {
  Bucket& b = buckets_[bucket];
  if (!b.flat.defined()) b.flat = Tensor::zeros({b.numel}, b.dtype);
  return b;
}

void GradientBuckets::gradient_ready(size_t k) {
  if (!armed_ || in_[k]) return;
  const Tensor& p = params_[k];
  if (!p.grad().defined()) return;
  copy_in(k, p.grad());
  // Before its bucket is issued: a reduce-scatter's output is allocated then.
  if (options_.drop_gradients) p.set_grad(Tensor());
  count_in(bucket_of_[k]);
  if (options_.overlap) issue_ready_buckets();
}

void GradientBuckets::add(size_t k, const Tensor& value) {
  WEFT_CHECK(armed_ && !in_[k], ValueError, "gradient buckets: parameter ", k,
             armed_ ? " added twice in one pass" : " added before arm()");
  copy_in(k, value);
  count_in(bucket_of_[k]);
  if (options_.overlap) issue_ready_buckets();
}

void GradientBuckets::copy_in(size_t k, const Tensor& value) {
  NoGradGuard no_grad;
  buffered(bucket_of_[k]).flat.narrow(0, offset_[k], value.numel()).copy_(value.reshape({value.numel()}));
  in_[k] = true;
}

void GradientBuckets::count_in(size_t bucket) {
  if (--buckets_[bucket].pending == 0 && options_.filled) options_.filled(bucket);
}

void GradientBuckets::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() && buckets_[next_to_issue_].pending == 0) {
    Bucket& b = buckets_[next_to_issue_++];
    if (options_.collective == BucketCollective::reduce_scatter) {
      b.reduced = Tensor::empty({b.numel / group_.size()}, b.dtype);
      b.work = group_.reduce_scatter_async(b.flat, b.reduced, ReduceOp::avg);
    } else {
      b.work = options_.compress ? group_.all_reduce_async(b.flat, ReduceOp::avg, *options_.compress)
                                 : group_.all_reduce_async(b.flat, ReduceOp::avg);
    }
    if (armed_) ++issued_before_finish_;
  }
}

void GradientBuckets::finish(const std::function<void(size_t bucket, const Tensor& result)>& take) {
  WEFT_CHECK(armed_, ValueError, "gradient buckets: finish() without arm() before the pass");
  armed_ = false;
  NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    for (size_t param : buckets_[k].params) {
      if (in_[param]) continue;
      buffered(k).flat.narrow(0, offset_[param], params_[param].numel()).zero_();
      count_in(k);
    }
  }
  issue_ready_buckets();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    b.work.wait();
    const bool scattered = options_.collective == BucketCollective::reduce_scatter;
    take(k, scattered ? b.reduced : b.flat);
    b.reduced = Tensor();
    if (!options_.keep_buffers) b.flat = Tensor();
  }
}

void GradientBuckets::reduce_gradients(const std::function<void(size_t bucket, const Tensor& result)>& take) {
  // Every gradient is there already, so there is nothing to overlap: each bucket's collective runs
  // on this thread as soon as it is filled (the blocking forms), rather than being handed to the
  // group's thread and waited for, which costs two thread switches a bucket on busy cores.
  NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buffered(k);
    for (size_t param : b.params) {
      const Tensor& grad = params_[param].grad();
      Tensor slot = b.flat.narrow(0, offset_[param], params_[param].numel());
      if (grad.defined()) slot.copy_(grad.reshape({grad.numel()}));
      else slot.zero_();
      if (options_.drop_gradients) params_[param].set_grad(Tensor());
    }
    if (options_.filled) options_.filled(k);
    if (options_.collective == BucketCollective::reduce_scatter) {
      b.reduced = Tensor::empty({b.numel / group_.size()}, b.dtype);
      group_.reduce_scatter(b.flat, b.reduced, ReduceOp::avg);
    } else if (options_.compress) {
      group_.all_reduce_async(b.flat, ReduceOp::avg, *options_.compress).wait();
    } else {
      group_.all_reduce(b.flat, ReduceOp::avg);
    }
    take(k, options_.collective == BucketCollective::reduce_scatter ? b.reduced : b.flat);
    b.reduced = Tensor();
    if (!options_.keep_buffers) b.flat = Tensor();
  }
}

int64_t GradientBuckets::wire_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    const DType native = b.dtype == DType::f64 ? DType::f64 : DType::f32;  // bf16, f16 reduce as f32
    bytes += b.numel * static_cast<int64_t>(dtype_size(options_.compress.value_or(native)));
  }
  return bytes;
}

}  // namespace weft::dist
