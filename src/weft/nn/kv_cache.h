// KVCache: the keys and values an autoregressive transformer has already computed, so that each
// new token costs one position's work instead of the whole sequence's.
//
// For every attention layer it holds k and v as [batch, heads, capacity, head_dim], allocated
// once: positions 0 .. length() - 1 are filled. A forward over T new tokens writes each layer's
// new k and v into positions length() .. length() + T - 1 (a copy into place; nothing grows or
// is reallocated) and attends over the views of positions 0 .. length() + T - 1; when every layer
// has written, the model calls advance(T). A forward that fails part-way leaves length() as it
// was, and the half-written slots are overwritten by the next one.
//
// Inference only: the copies into the cache are not recorded by autograd, so append refuses
// keys or values that carry gradient history (run cached forwards under NoGradGuard).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::nn {

class KVCache {
 public:
  KVCache(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim, DType dtype = DType::f32);

  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t batch() const { return keys_[0].size(0); }
  int64_t capacity() const { return keys_[0].size(2); }
  int64_t length() const { return length_; }  // positions filled, the same in every layer

  // Writes k, v [batch, heads, T, head_dim] as `layer`'s positions length() .. length() + T - 1
  // and returns its keys and values for positions 0 .. length() + T - 1 (views of the cache).
  // More positions than the capacity → ShapeError; k or v requiring grad → ValueError.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // Marks T more positions filled, once every layer has appended them.
  void advance(int64_t T);
  void clear() { length_ = 0; }

  // Continuous batching's shared storage: each batch row of this cache a slot, one sequence's.
  // slot(row) is an empty cache of batch 1 over that row's storage: what it appends lands in this
  // cache's tensors, where one decode_attention call (ops/attention.h) reads every slot at once.
  KVCache slot(int64_t row) const;
  int64_t slot_index() const { return slot_; }  // -1 for a cache that is not a slot
  // The storage a slot is a row of (a cache's own tensors otherwise), by layer.
  const Tensor& shared_keys(int64_t layer) const { return shared_keys_[static_cast<size_t>(layer)]; }
  const Tensor& shared_values(int64_t layer) const { return shared_values_[static_cast<size_t>(layer)]; }

 private:
  KVCache() = default;
  std::vector<Tensor> keys_, values_;  // one per layer
  std::vector<Tensor> shared_keys_, shared_values_;
  int64_t length_ = 0;
  int64_t slot_ = -1;
};

// Continuous batching (serve/): B sequences decoded together, each with its own cache of batch 1
// at its own length, so that one may join or leave between steps without touching the others.
// When they are all slots of one cache (KVCache::slot), attention takes them in one call.
using KVCaches = std::vector<KVCache*>;

}  // namespace weft::nn
