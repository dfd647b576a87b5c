// Elementwise kernels (not differentiable; the ops layer builds autograd on top).
//
// Binary kernels broadcast NumPy-style and require both inputs to have the same floating dtype;
// f16 and bf16 are computed in f32 and rounded once on store. The *_backward ops are the fused
// derivative kernels the ops layer's backward passes use: they take (grad_output, x) — or
// (grad_output, y) where the derivative is cheaper from the output — and return grad_input.
//
// Each kernel has a fast path (typed loops over coalesced rows, vectorisable when contiguous,
// split across threads) and reference::unary / reference::binary, a plain per-element loop in
// f64 that tests compare it against.
#pragma once
#include "weft/core/tensor.h"

namespace weft::cpu {

enum class Unary { neg, exp, log, sqrt, abs, relu, gelu_tanh, gelu_erf, sigmoid, tanh, square };
enum class Binary {
  add, sub, mul, div, pow, maximum, minimum,
  relu_backward,       // (g, x): g * (x > 0)
  gelu_tanh_backward,  // (g, x)
  gelu_erf_backward,   // (g, x)
  sigmoid_backward,    // (g, y): g * y * (1 - y)
  tanh_backward,       // (g, y): g * (1 - y^2)
  eq, gt, lt,          // 1 where true, 0 elsewhere, in the inputs' dtype
};

const char* unary_name(Unary op);
const char* binary_name(Binary op);

Tensor unary(Unary op, const Tensor& x);
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
Tensor binary(Binary op, const Tensor& a, double b);  // b as a scalar of a's dtype

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(Binary::add, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(Binary::mul, a, b); }
inline Tensor mul(const Tensor& a, double b) { return binary(Binary::mul, a, b); }
// In place: a op= b, b broadcast to a's shape.
void binary_(Binary op, Tensor& a, const Tensor& b);
inline void add_(Tensor& a, const Tensor& b) { binary_(Binary::add, a, b); }
// a += alpha * b (same shape), the optimizer and gradient-accumulation workhorse.
void axpy_(Tensor& a, double alpha, const Tensor& b);
// x * scale where keep (u8, x's shape, contiguous) is 1, else 0: dropout's forward and backward.
Tensor masked_scale(const Tensor& x, const Tensor& keep, double scale);

namespace reference {
Tensor unary(Unary op, const Tensor& x);
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
}  // namespace reference

}  // namespace weft::cpu
