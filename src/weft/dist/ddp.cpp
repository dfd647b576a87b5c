#include "weft/dist/ddp.h"

#include <algorithm>

#include "weft/autograd/grad_mode.h"

namespace weft::dist {

namespace {
constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;
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

DistributedDataParallel::DistributedDataParallel(nn::Module& model, ProcessGroup& group, DDPOptions options)
    : group_(group), options_(options), params_(model.parameters()) {
  {
    NoGradGuard no_grad;
    for (Tensor& p : params_) group_.broadcast(p, 0);
    for (auto& [name, buffer] : model.named_buffers()) group_.broadcast(buffer, 0);
  }
  bucket_of_.resize(params_.size());
  copied_.assign(params_.size(), false);
  for (const std::vector<size_t>& members : reverse_order_buckets(params_, options_.bucket_bytes)) {
    Bucket& b = buckets_.emplace_back();
    for (size_t k : members) {
      b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
      b.params.push_back(k);
      bucket_of_[k] = buckets_.size() - 1;
    }
  }
  for (Bucket& b : buckets_) {
    const Tensor& last = params_[b.params.back()];
    b.flat = Tensor::zeros({b.offsets.back() + last.numel()}, last.dtype());
  }
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_grad_ready_hook([this, k](const Tensor&) { gradient_ready(k); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (const Error&) {  // a failed all-reduce was reported by finish_backward already
    }
  }
  for (RemovableHandle& hook : hooks_) hook.remove();
}

void DistributedDataParallel::prepare_backward(bool last_micro_batch) {
  synchronising_ = last_micro_batch;
  if (!synchronising_) return;
  for (Bucket& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  std::fill(copied_.begin(), copied_.end(), false);
  next_to_issue_ = 0;
  issued_during_backward_ = 0;
  armed_ = true;
}

void DistributedDataParallel::gradient_ready(size_t k) {
  if (!armed_ || copied_[k]) return;
  const Tensor& grad = params_[k].grad();
  if (!grad.defined()) return;
  Bucket& b = buckets_[bucket_of_[k]];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), k) - b.params.begin());
  NoGradGuard no_grad;
  b.flat.narrow(0, b.offsets[slot], grad.numel()).copy_(grad.reshape({grad.numel()}));
  copied_[k] = true;
  --b.pending;
  if (options_.overlap) issue_ready_buckets();
}

void DistributedDataParallel::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() && buckets_[next_to_issue_].pending == 0) {
    Bucket& b = buckets_[next_to_issue_++];
    b.work = options_.compress ? group_.all_reduce_async(b.flat, ReduceOp::avg, *options_.compress)
                               : group_.all_reduce_async(b.flat, ReduceOp::avg);
    if (armed_) ++issued_during_backward_;
  }
}

void DistributedDataParallel::finish_backward() {
  if (!synchronising_) return;
  synchronising_ = false;
  WEFT_CHECK(armed_, ValueError, "DDP: finish_backward without prepare_backward before the backward");
  armed_ = false;
  NoGradGuard no_grad;
  // Parameters without a gradient in this pass add zeros; then everything not issued goes.
  for (Bucket& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      if (copied_[b.params[slot]]) continue;
      b.flat.narrow(0, b.offsets[slot], params_[b.params[slot]].numel()).zero_();
      --b.pending;
    }
  }
  issue_ready_buckets();
  for (Bucket& b : buckets_) {
    b.work.wait();
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const Tensor& p = params_[b.params[slot]];
      // The gradient becomes a view of its bucket (PyTorch's gradient_as_bucket_view): no copy
      // back, and no second copy of every gradient alive between the step and the next backward.
      p.set_grad(b.flat.narrow(0, b.offsets[slot], p.numel()).view(p.shape()));
    }
  }
}

void DistributedDataParallel::abandon_pass() {
  if (!synchronising_) prepare_backward(true);
  finish_backward();
}

bool DistributedDataParallel::on_any_rank(bool flag) { return group_.any(flag); }

int64_t DistributedDataParallel::all_reduced_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) {
    const DType native = b.flat.dtype() == DType::f64 ? DType::f64 : DType::f32;  // bf16, f16 reduce as f32
    bytes += b.flat.numel() * static_cast<int64_t>(dtype_size(options_.compress.value_or(native)));
  }
  return bytes;
}

}  // namespace weft::dist
