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

// X(name, profiler family, autocast policy). The families are the profiler's (docs/profiler.md
// mirrors them); "other" is what an op of no family shows.
#define WEFT_OPS(X)                                                       \
  X(matmul, "GEMM", lower)                                                \
  X(linear, "GEMM", lower)                                                \
  X(conv2d, "convolution", lower)                                         \
  X(conv2d_relu, "convolution", lower) /* the fused blocks the CNN runs */ \
  X(conv2d_relu_max_pool2d, "convolution", lower)                         \
  X(scaled_dot_product_attention, "attention", lower)                     \
  X(decode_attention, "other", keep)                                      \
  X(softmax, "attention", f32)                                            \
  X(layer_norm, "normalisation", f32)                                     \
  X(batch_norm, "normalisation", f32)                                     \
  X(embedding, "embedding", keep)                                         \
  X(cross_entropy, "cross-entropy", f32_inside)                           \
  X(log_softmax, "cross-entropy", f32)                                    \
  X(mse_loss, "cross-entropy", f32)                                       \
  X(max_pool2d, "pooling", keep)                                          \
  X(avg_pool2d, "pooling", keep)                                          \
  X(adaptive_avg_pool2d, "pooling", keep)                                 \
  X(adamw_step, "optimizer", keep)                                        \
  X(adam_step, "optimizer", keep)                                         \
  X(sgd_step, "optimizer", keep)                                          \
  X(clip_grad_norm, "optimizer", keep)                                    \
  X(grad_norm, "optimizer", keep)                                         \
  X(to, "casts", keep)                                                    \
  X(clone, "copies and views", keep)                                      \
  X(cat, "copies and views", keep)                                        \
  X(view, "copies and views", keep)                                       \
  X(reshape, "copies and views", keep)                                    \
  X(transpose, "copies and views", keep)                                  \
  X(permute, "copies and views", keep)                                    \
  X(slice, "copies and views", keep)                                      \
  X(narrow, "copies and views", keep)                                     \
  X(select, "copies and views", keep)                                     \
  X(expand, "copies and views", keep)                                     \
  X(squeeze, "copies and views", keep)                                    \
  X(unsqueeze, "copies and views", keep)                                  \
  X(flatten, "copies and views", keep)                                    \
  X(contiguous, "copies and views", keep)                                 \
  X(checkpoint, "framework", keep)                                        \
  X(fake_quantize, "quantization", keep)                                  \
  X(fake_quantize_per_channel, "quantization", keep)                      \
  X(add, "elementwise", keep)                                             \
  X(sub, "elementwise", keep)                                             \
  X(mul, "elementwise", keep)                                             \
  X(div, "elementwise", keep)                                             \
  X(add_scalar, "elementwise", keep)                                      \
  X(mul_scalar, "elementwise", keep)                                      \
  X(neg, "elementwise", keep)                                             \
  X(exp, "elementwise", f32)                                              \
  X(log, "elementwise", f32)                                              \
  X(sqrt, "elementwise", f32)                                             \
  X(pow, "elementwise", f32)                                              \
  X(relu, "elementwise", keep)                                            \
  X(gelu, "elementwise", keep)                                            \
  X(sigmoid, "elementwise", keep)                                         \
  X(tanh, "elementwise", keep)                                            \
  X(dropout, "elementwise", keep)                                         \
  X(sum, "elementwise", f32)                                              \
  X(max, "elementwise", keep)                                             \
  X(accumulate_grad, "elementwise", keep)

enum class Op : uint8_t {
#define WEFT_OP_ENUM(name, family, policy) name,
  WEFT_OPS(WEFT_OP_ENUM)
#undef WEFT_OP_ENUM
};

struct OpInfo {
  const char* name;    // as the op's scope, its backward node and the profiler's tables show it
  const char* family;  // the profiler's row for it
  AutocastPolicy autocast;
};

inline constexpr OpInfo kOps[] = {
#define WEFT_OP_INFO(name, family, policy) {#name, family, AutocastPolicy::policy},
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
