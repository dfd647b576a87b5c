#include "weft/dist/ddp.h"

#include "weft/autograd/grad_mode.h"

namespace weft::dist {

namespace {

// Rank 0's parameters and buffers to every rank of `group` (blocking): the parameters, in order.
std::vector<Tensor> broadcast_from_rank_0(nn::Module& model, ProcessGroup& group) {
  NoGradGuard no_grad;
  std::vector<Tensor> params = model.parameters();
  for (Tensor& p : params) group.broadcast(p, 0);
  for (auto& [name, buffer] : model.named_buffers()) group.broadcast(buffer, 0);
  return params;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& model, ProcessGroup& group, DDPOptions options)
    : group_(group),
      params_(broadcast_from_rank_0(model, group)),
      buckets_(params_, reverse_order_buckets(params_, options.bucket_bytes), group,
               {.compress = options.compress,
                .overlap = options.overlap,
                .drop_gradients = options.transient_buckets,
                .keep_buffers = !options.transient_buckets}) {}

void DistributedDataParallel::prepare_backward(bool last_micro_batch) {
  synchronising_ = last_micro_batch;
  if (synchronising_) buckets_.arm();
}

void DistributedDataParallel::take_bucket(size_t bucket, const Tensor& reduced) {
  // The gradient becomes a view of its bucket (PyTorch's gradient_as_bucket_view): no copy back,
  // and no second copy of every gradient alive between the step and the next backward.
  for (size_t k : buckets_.params(bucket)) {
    const Tensor& p = params_[k];
    p.set_grad(reduced.narrow(0, buckets_.offset(k), p.numel()).view(p.shape()));
  }
}

void DistributedDataParallel::finish_backward() {
  if (!synchronising_) return;
  synchronising_ = false;
  WEFT_CHECK(buckets_.armed(), ValueError, "DDP: finish_backward without prepare_backward before the backward");
  buckets_.finish([this](size_t bucket, const Tensor& reduced) { take_bucket(bucket, reduced); });
}

void DistributedDataParallel::abandon_pass() {
  if (!synchronising_) prepare_backward(true);
  finish_backward();
}

bool DistributedDataParallel::on_any_rank(bool flag) { return group_.any(flag); }

void DistributedDataParallel::reduce_gradients() {
  buckets_.reduce_gradients([this](size_t bucket, const Tensor& reduced) { take_bucket(bucket, reduced); });
}

LocalSGD::LocalSGD(nn::Module& model, ProcessGroup& group, int64_t bucket_bytes)
    : params_(broadcast_from_rank_0(model, group)),
      buckets_(params_, reverse_order_buckets(params_, bucket_bytes), group,
               {.hook_gradients = false, .keep_buffers = false}) {}

void LocalSGD::average_parameters() {
  buckets_.arm();
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket)
    for (size_t k : buckets_.params(bucket)) buckets_.add(k, params_[k]);
  buckets_.finish([this](size_t bucket, const Tensor& averaged) {
    for (size_t k : buckets_.params(bucket)) {
      Tensor p = params_[k];
      p.copy_(averaged.narrow(0, buckets_.offset(k), p.numel()).view(p.shape()));
    }
  });
}

}  // namespace weft::dist
