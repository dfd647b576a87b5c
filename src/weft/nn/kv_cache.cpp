#include "weft/nn/kv_cache.h"

namespace weft::nn {

KVCache::KVCache(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim, DType dtype) {
  WEFT_CHECK(layers > 0 && batch > 0 && heads > 0 && capacity > 0 && head_dim > 0, ValueError,
             "KVCache: layers, batch, heads, capacity and head_dim must be positive, got ", layers, ", ", batch, ", ",
             heads, ", ", capacity, ", ", head_dim);
  for (int64_t i = 0; i < layers; ++i) {
    keys_.push_back(Tensor::empty({batch, heads, capacity, head_dim}, dtype));
    values_.push_back(Tensor::empty({batch, heads, capacity, head_dim}, dtype));
  }
  shared_keys_ = keys_;
  shared_values_ = values_;
}

KVCache KVCache::slot(int64_t row) const {
  WEFT_CHECK(slot_ < 0, ValueError, "KVCache: a slot has no slots of its own");
  WEFT_CHECK(row >= 0 && row < batch(), IndexError, "KVCache: slot ", row, " of ", batch());
  KVCache s;
  for (size_t l = 0; l < keys_.size(); ++l) {
    s.keys_.push_back(keys_[l].narrow(0, row, 1));
    s.values_.push_back(values_[l].narrow(0, row, 1));
  }
  s.shared_keys_ = keys_;
  s.shared_values_ = values_;
  s.slot_ = row;
  return s;
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  WEFT_CHECK(layer >= 0 && layer < layers(), IndexError, "KVCache: layer ", layer, " of ", layers());
  const Tensor& keys = keys_[static_cast<size_t>(layer)];
  const Tensor& values = values_[static_cast<size_t>(layer)];
  WEFT_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.shape() == v.shape() && k.size(0) == keys.size(0) &&
                 k.size(1) == keys.size(1) && k.size(3) == keys.size(3),
             ShapeError, "KVCache: expected k and v [", keys.size(0), ", ", keys.size(1), ", T, ", keys.size(3),
             "], got ", k.defined() ? shape_str(k.shape()) : "undefined", " and ",
             v.defined() ? shape_str(v.shape()) : "undefined");
  WEFT_CHECK(!k.requires_grad() && !v.requires_grad(), ValueError,
             "KVCache: the keys and values carry gradient history, which the cache's copies would drop; "
             "run cached inference under NoGradGuard");
  const int64_t T = k.size(2), end = length_ + T;
  WEFT_CHECK(end <= capacity(), ShapeError, "KVCache: ", length_, " cached and ", T,
             " new positions exceed the capacity of ", capacity());
  keys.narrow(2, length_, T).copy_(k);
  values.narrow(2, length_, T).copy_(v);
  return {keys.narrow(2, 0, end), values.narrow(2, 0, end)};
}

void KVCache::advance(int64_t T) {
  WEFT_CHECK(T >= 0 && length_ + T <= capacity(), ShapeError, "KVCache: cannot advance ", length_, " positions by ", T,
             " within the capacity of ", capacity());
  length_ += T;
}

}  // namespace weft::nn
