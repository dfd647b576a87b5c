// Fused scaled-dot-product attention (not differentiable; ops/attention.h builds autograd on it).
//
// For q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading dims and dtype:
//   out = softmax(q k^T * scale + mask) v          [..., Tq, Dv]
//   lse = log sum_j exp(q_i . k_j * scale)          [..., Tq], over the keys row i may see
// With causal, query i sees keys 0 .. i + Tk - Tq; a row that sees no key (Tq > Tk) is NaN in out
// and lse, and its gradient to q is NaN (it adds nothing to dk / dv).
//
// The forward streams over blocks of keys with an online softmax (FlashAttention): each query row
// keeps a running maximum m, a running sum l of exp(s - m) and an unnormalised output, rescaled by
// exp(m_old - m_new) whenever the maximum grows. No [Tq, Tk] matrix exists; per thread there are
// tiles of a few blocks' rows. The backward recomputes each score tile from q, k and lse
// (p = exp(s - lse)), with D_i = sum(dout_i * out_i) standing in for sum_j p_ij dp_ij:
//   dv_j = sum_i p_ij dout_i,  ds_ij = p_ij (dout_i . v_j - D_i),
//   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i.
// So the memory kept between forward and backward is out and lse: O(Tq) per row-set, not O(Tq Tk).
//
// Precision: f32, bf16 and f16 are read into f32 tiles and accumulated in f32, f64 in f64; out,
// dq, dk, dv are rounded once to the inputs' dtype; lse is f32 (f64 for f64). Inputs are read in
// place through their strides (the head-transposed views attention layers make need no copy).
//
// Threads: the forward splits (batch row, block of queries) pairs, the backward batch rows (one
// task owns a row's dk / dv / dq, so no two threads add into the same gradient); each task's
// arithmetic is the same whichever thread runs it, so results do not depend on the thread count.
// Scratch outside the caching allocator: per thread (the forward's kept for the next call of the
// same head sizes), a few 64 x 64 and [64, max(D, Dv)] f32
// tiles, plus in the backward f32 copies of q and dout and the dq accumulator, [Tq + 4, D or Dv
// rounded up to 16] each, and D_i.
//
// Speed: for the f32 computation (f32, bf16, f16 inputs) the tile products (64 x 64 blocks) run as
// an AVX-512 kernel when weft is built for an AVX-512 machine (-march=native, the default), and the
// exponentials as fast_exp (fast_math.h); f64, and f32 products elsewhere, run the plain loops
// beside them. Causal tiles on the diagonal compute only the keys each group of four rows sees.
//
// reference:: are plain f64 loops over whole rows (materialising each row's probabilities), the
// definition the tests hold the fused kernels to.
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft::cpu {

struct AttentionForward {
  Tensor out;  // [..., Tq, Dv], q's dtype, contiguous
  Tensor lse;  // [..., Tq], f32 (f64 for f64 inputs): what the backward needs besides q, k, v, out
};
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);

struct AttentionGrads {
  Tensor dq, dk, dv;  // q's, k's and v's shapes, in the inputs' dtype, contiguous
};
// grad_out has out's shape and dtype; out and lse are attention_forward's.
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, bool causal, double scale);

// One decoding step of B sequences whose keys and values sit in slots of shared caches (continuous
// batching, nn/kv_cache.h): for each b, k_new[b] and v_new[b] ([H, 1, D]) are written at position
// lengths[b] of slot slots[b] of k_cache and v_cache ([S, H, capacity, D], contiguous), and q[b]
// attends to that slot's positions 0 .. lengths[b] (itself last): out [B, H, 1, D] = softmax(q k^T
// * scale) v. One call for the whole step, where attention per sequence would be a handful of ops
// for each. q, k_new, v_new are read through their strides. f32 only, the exponentials as fast_exp
// (as the forward's f32 tiles); a length past the capacity,
// a slot out of range or used twice → ValueError / ShapeError. Rows are AVX-512 vectors on an
// AVX-512 build, plain loops otherwise; tested against the per-sequence scaled_dot_product_attention.
Tensor decode_attention(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                        const Tensor& v_cache, const std::vector<int64_t>& slots, const std::vector<int64_t>& lengths,
                        double scale);

namespace reference {
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                   double scale);  // out and lse in f64
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  bool causal, double scale);  // f64; recomputes the forward itself
}  // namespace reference

}  // namespace weft::cpu
