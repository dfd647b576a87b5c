// The op descriptor table: every op that opens a profiler scope, as an enum, with what the layers
// need to know of it (as ggml's op enum and its name table). It sits in monitor, below kernels
// and ops, because the profiler groups scopes by the family written here and the ops read their
// autocast policy from it; the trace and the tables print `name`.
//
// Invariant: Op's values index kOps in order (the X-macro writes both from one list), so looking
// an op up is one indexed load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weft {

// How an op's floating inputs are cast under autocast (ops/autocast.h applies it; docs/mixed-precision.md
// lists it). keep: in their own dtype. lower: to the low type. f32: 16-bit inputs to f32.
// f32_inside: 16-bit inputs go in as they are, because the kernel reads them into f32 and
// accumulates in f32 itself (a cast would only add a round trip through memory: 50k-class logits
// are the largest activation of a GPT step).
enum class AutocastPolicy : uint8_t { keep, lower, f32, f32_inside };

// X(name, profiler family, autocast policy, FLOPs per element). The families are the profiler's
// (docs/profiler.md mirrors them); "other" is what an op of no family shows. FLOPs per element
// are what the profiler counts for each element of the tensor the op's scope names
// (OpScope::set_cost_per_element: the output of elementwise ops, the input of reductions, norms,
// losses and adaptive pooling); 0 for ops that move bytes only, and for those whose count depends
// on more than one tensor's size (GEMMs, convolution, attention, pooling windows, the optimizers
// and accumulate_grad), which compute it from their shapes beside their kernel call. softmax and
// log_softmax: max, sub, exp, sum, scale or sub (5); cross_entropy as log_softmax, per logit;
// mse_loss: sub, square, sum (3); the norms: a sum and a sum of squares (2 + 2), then
// (x - mean) * rstd * w + b (4).
#define WEFT_OPS(X)                                                            \
  X(matmul, "GEMM", lower, 0)                                                  \
  X(linear, "GEMM", lower, 0)                                                  \
  X(conv2d, "convolution", lower, 0)                                           \
  X(conv2d_relu, "convolution", lower, 0) /* the CNN's fused blocks */         \
  X(conv2d_relu_max_pool2d, "convolution", lower, 0)                           \
  X(scaled_dot_product_attention, "attention", lower, 0)                       \
  X(decode_attention, "other", keep, 0)                                        \
  X(softmax, "attention", f32, 5)                                              \
  X(layer_norm, "normalisation", f32, 8)                                       \
  X(batch_norm, "normalisation", f32, 8)                                       \
  X(embedding, "embedding", keep, 0)                                           \
  X(cross_entropy, "cross-entropy", f32_inside, 5)                             \
  X(log_softmax, "cross-entropy", f32, 5)                                      \
  X(mse_loss, "cross-entropy", f32, 3)                                         \
  X(max_pool2d, "pooling", keep, 0)                                            \
  X(avg_pool2d, "pooling", keep, 0)                                            \
  X(adaptive_avg_pool2d, "pooling", keep, 1)                                   \
  X(adamw_step, "optimizer", keep, 0)                                          \
  X(adam_step, "optimizer", keep, 0)                                           \
  X(sgd_step, "optimizer", keep, 0)                                            \
  X(clip_grad_norm, "optimizer", keep, 0)                                      \
  X(grad_norm, "optimizer", keep, 0)                                           \
  X(to, "casts", keep, 0)                                                      \
  X(clone, "copies and views", keep, 0)                                        \
  X(cat, "copies and views", keep, 0)                                          \
  X(view, "copies and views", keep, 0)                                         \
  X(reshape, "copies and views", keep, 0)                                      \
  X(transpose, "copies and views", keep, 0)                                    \
  X(permute, "copies and views", keep, 0)                                      \
  X(slice, "copies and views", keep, 0)                                        \
  X(narrow, "copies and views", keep, 0)                                       \
  X(select, "copies and views", keep, 0)                                       \
  X(expand, "copies and views", keep, 0)                                       \
  X(squeeze, "copies and views", keep, 0)                                      \
  X(unsqueeze, "copies and views", keep, 0)                                    \
  X(flatten, "copies and views", keep, 0)                                      \
  X(contiguous, "copies and views", keep, 0)                                   \
  X(checkpoint, "framework", keep, 0)                                          \
  X(fake_quantize, "quantization", keep, 0)                                    \
  X(fake_quantize_per_channel, "quantization", keep, 0)                        \
  X(add, "elementwise", keep, 1)                                               \
  X(sub, "elementwise", keep, 1)                                               \
  X(mul, "elementwise", keep, 1)                                               \
  X(div, "elementwise", keep, 1)                                               \
  X(add_scalar, "elementwise", keep, 1)                                        \
  X(mul_scalar, "elementwise", keep, 1)                                        \
  X(neg, "elementwise", keep, 1)                                               \
  X(exp, "elementwise", f32, 1)                                                \
  X(log, "elementwise", f32, 1)                                                \
  X(sqrt, "elementwise", f32, 1)                                               \
  X(pow, "elementwise", f32, 1)                                                \
  X(relu, "elementwise", keep, 1)                                              \
  X(gelu, "elementwise", keep, 1)                                              \
  X(sigmoid, "elementwise", keep, 1)                                           \
  X(tanh, "elementwise", keep, 1)                                              \
  X(dropout, "elementwise", keep, 1)                                           \
  X(sum, "elementwise", f32, 1)                                                \
  X(max, "elementwise", keep, 1)                                               \
  X(accumulate_grad, "elementwise", keep, 0)

enum class Op : uint8_t {
#define WEFT_OP_ENUM(name, family, policy, flops_per_element) name,
  WEFT_OPS(WEFT_OP_ENUM)
#undef WEFT_OP_ENUM
};

struct OpInfo {
  const char* name;    // as the op's scope, its backward node and the profiler's tables show it
  const char* family;  // the profiler's row for it
  AutocastPolicy autocast;
  double flops_per_element;
};

inline constexpr OpInfo kOps[] = {
#define WEFT_OP_INFO(name, family, policy, flops_per_element) \
  {#name, family, AutocastPolicy::policy, flops_per_element},
    WEFT_OPS(WEFT_OP_INFO)
#undef WEFT_OP_INFO
};

constexpr const OpInfo& op_info(Op op) { return kOps[static_cast<size_t>(op)]; }
constexpr const char* op_name(Op op) { return op_info(op).name; }

// The op named `name`, for what arrives as text (trace events, backward scopes); null for a name
// that is no op's.
constexpr const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (name == info.name) return &info;
  return nullptr;
}

}  // namespace weft
