#include "weft/nn/transformer.h"

#include "weft/ops/arith.h"
#include "weft/ops/attention.h"
#include "weft/ops/shape.h"

namespace weft::nn {

MultiheadAttention::MultiheadAttention(int64_t dim, int64_t num_heads, double dropout, bool bias)
    : Module("MultiheadAttention"), dim(dim), num_heads(num_heads) {
  WEFT_CHECK(dim > 0 && num_heads > 0 && dim % num_heads == 0, ValueError, "MultiheadAttention: dim ", dim,
             " must be a positive multiple of num_heads ", num_heads);
  register_module("c_attn", c_attn, std::make_shared<Linear>(dim, 3 * dim, bias));
  register_module("c_proj", c_proj, std::make_shared<Linear>(dim, dim, bias));
  register_module("resid_dropout", resid_dropout, std::make_shared<Dropout>(dropout));
}

Tensor MultiheadAttention::forward(const Tensor& x) { return attend(x, nullptr, nullptr, 0); }

namespace {

// Whether the caches are all slots of one f32 cache (KVCache::slot), which decode_attention reads at once.
bool slots_of_one_cache(const KVCaches& caches, int64_t layer, DType dtype) {
  if (caches.empty() || dtype != DType::f32) return false;
  const Tensor& storage = caches.front()->shared_keys(layer);
  if (storage.dtype() != DType::f32) return false;
  for (const KVCache* c : caches)
    if (c->slot_index() < 0 || c->shared_keys(layer).data_ptr() != storage.data_ptr()) return false;
  return true;
}

}  // namespace

Tensor MultiheadAttention::forward(const Tensor& x, KVCache& cache, int64_t layer) {
  return attend(x, &cache, nullptr, layer);
}

Tensor MultiheadAttention::forward(const Tensor& x, const KVCaches& caches, int64_t layer) {
  return attend(x, nullptr, &caches, layer);
}

Tensor MultiheadAttention::operator()(const Tensor& x, KVCache& cache, int64_t layer) {
  return call_with_hooks(x, [&](const Tensor& input) { return forward(input, cache, layer); });
}

Tensor MultiheadAttention::operator()(const Tensor& x, const KVCaches& caches, int64_t layer) {
  return call_with_hooks(x, [&](const Tensor& input) { return forward(input, caches, layer); });
}

Tensor MultiheadAttention::attend(const Tensor& x, KVCache* cache, const KVCaches* caches, int64_t layer) {
  WEFT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == dim, ShapeError, "MultiheadAttention(", dim,
             "): expected x [B, T, ", dim, "], got ", x.defined() ? shape_str(x.shape()) : "undefined");
  const int64_t B = x.size(0), T = x.size(1), head_dim = dim / num_heads;
  // [B, T, 3 * width] -> q, k, v each [B, T, width] -> [B, heads, T, head_dim] (views, no copies).
  // width is dim, or under tensor parallelism this rank's heads' share of it.
  Tensor fused = (*c_attn)(x);
  const int64_t width = fused.size(2) / 3, heads = width / head_dim;
  std::vector<Tensor> qkv = split(fused, width, 2);
  for (Tensor& t : qkv) t = t.view({B, T, heads, head_dim}).transpose(1, 2);
  Tensor y;
  if (caches && slots_of_one_cache(*caches, layer, qkv[0].dtype())) {  // one call for every sequence
    WEFT_CHECK(T == 1 && static_cast<int64_t>(caches->size()) == B, ShapeError, "MultiheadAttention: ", caches->size(),
               " caches for x ", shape_str(x.shape()), "; one new position per cache, [", caches->size(), ", 1, ", dim,
               "]");
    std::vector<int64_t> slots, lengths;
    for (const KVCache* c : *caches) {
      slots.push_back(c->slot_index());
      lengths.push_back(c->length());
    }
    const KVCache& shared = *caches->front();
    y = decode_attention(qkv[0], qkv[1], qkv[2], shared.shared_keys(layer), shared.shared_values(layer), slots, lengths);
  } else if (caches) {  // one position per sequence, each over its own cache
    WEFT_CHECK(T == 1 && static_cast<int64_t>(caches->size()) == B, ShapeError, "MultiheadAttention: ", caches->size(),
               " caches for x ", shape_str(x.shape()), "; one new position per cache, [", caches->size(), ", 1, ", dim,
               "]");
    std::vector<Tensor> rows;
    for (int64_t b = 0; b < B; ++b) {
      auto [k, v] = (*caches)[static_cast<size_t>(b)]->append(layer, qkv[1].narrow(0, b, 1), qkv[2].narrow(0, b, 1));
      rows.push_back(scaled_dot_product_attention(qkv[0].narrow(0, b, 1), k, v, /*causal=*/true));
    }
    y = B == 1 ? rows[0] : cat(rows, 0);
  } else {
    auto [k, v] = cache ? cache->append(layer, qkv[1], qkv[2]) : std::pair{qkv[1], qkv[2]};
    y = scaled_dot_product_attention(qkv[0], k, v, /*causal=*/true);
  }
  // Without autograd nothing else keeps q, k and v: free them before the projection runs.
  qkv.clear();
  fused = Tensor();
  y = y.transpose(1, 2).reshape({B, T, width});  // heads side by side again
  return (*resid_dropout)((*c_proj)(y));
}

std::string MultiheadAttention::extra_repr() const { return str("dim=", dim, ", num_heads=", num_heads); }

FeedForward::FeedForward(int64_t dim, int64_t hidden, double dropout, bool bias) : Module("FeedForward") {
  register_module("c_fc", c_fc, std::make_shared<Linear>(dim, hidden, bias));
  register_module("gelu", gelu, std::make_shared<GELU>(GeluApproximation::tanh));
  register_module("c_proj", c_proj, std::make_shared<Linear>(hidden, dim, bias));
  register_module("dropout", this->dropout, std::make_shared<Dropout>(dropout));
}

Tensor FeedForward::forward(const Tensor& x) {
  // Two statements: a temporary lives to the end of its full expression, and c_fc's output is not
  // needed once gelu has run (without autograd, nothing else keeps it).
  Tensor hidden = (*gelu)((*c_fc)(x));
  return (*dropout)((*c_proj)(hidden));
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t num_heads, int64_t mlp_ratio, double dropout, bool bias)
    : Module("TransformerBlock") {
  register_module("ln_1", ln_1, std::make_shared<LayerNorm>(dim));
  register_module("attn", attn, std::make_shared<MultiheadAttention>(dim, num_heads, dropout, bias));
  register_module("ln_2", ln_2, std::make_shared<LayerNorm>(dim));
  register_module("mlp", mlp, std::make_shared<FeedForward>(dim, mlp_ratio * dim, dropout, bias));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor h = add(x, (*attn)((*ln_1)(x)));
  return add(h, (*mlp)((*ln_2)(h)));
}

Tensor TransformerBlock::forward(const Tensor& x, KVCache& cache, int64_t layer) {
  Tensor h = add(x, (*attn)((*ln_1)(x), cache, layer));
  return add(h, (*mlp)((*ln_2)(h)));
}

Tensor TransformerBlock::operator()(const Tensor& x, KVCache& cache, int64_t layer) {
  return call_with_hooks(x, [&](const Tensor& input) { return forward(input, cache, layer); });
}

Tensor TransformerBlock::forward(const Tensor& x, const KVCaches& caches, int64_t layer) {
  Tensor h = add(x, (*attn)((*ln_1)(x), caches, layer));
  return add(h, (*mlp)((*ln_2)(h)));
}

Tensor TransformerBlock::operator()(const Tensor& x, const KVCaches& caches, int64_t layer) {
  return call_with_hooks(x, [&](const Tensor& input) { return forward(input, caches, layer); });
}

}  // namespace weft::nn
