// kernels/cuda's table. An op with no CUDA kernel yet answers a DeviceError naming it, so that a
// model run on the device stops at its first such op with that op's name rather than reading
// device memory on the host.
#include <algorithm>
#include <string>

#include "weft/core/error.h"
#include "weft/kernels/cuda/elementwise.h"
#include "weft/kernels/kernel_table.h"

namespace weft::kernels {

namespace {

template <size_t N>
struct OpName {
  char text[N];
  constexpr OpName(const char (&name)[N]) { std::copy_n(name, N, text); }
};

// Converts to any entry's function pointer type: a function that throws.
template <OpName op>
struct NoKernelYet {
  template <typename R, typename... Args>
  using Entry = R (*)(Args...);
  template <typename R, typename... Args>
  operator Entry<R, Args...>() const {
    return [](Args...) -> R {
      throw DeviceError(str(op.text, " has no CUDA kernel yet: run it on the CPU (.to(Device::cpu()))"));
    };
  }
};

}  // namespace

const KernelTable cuda_kernels = {
    .unary = cuda::unary,
    .binary = [](Binary op, const Tensor& a, const Tensor& b) { return cuda::binary(op, a, b); },
    .binary_scalar = [](Binary op, const Tensor& a, double b) { return cuda::binary(op, a, b); },
    .binary_ = cuda::binary_,
    .sum = NoKernelYet<"sum">(),
    .sum_to = NoKernelYet<"sum_to">(),
    .max = NoKernelYet<"max">(),
    .argmax = NoKernelYet<"argmax">(),
    .matmul = NoKernelYet<"matmul">(),
    .fold_rows = NoKernelYet<"fold_rows">(),
    .attention_forward = NoKernelYet<"attention">(),
    .attention_backward = NoKernelYet<"attention_backward">(),
    .decode_attention = NoKernelYet<"decode_attention">(),
    .conv2d = NoKernelYet<"conv2d">(),
    .conv2d_backward_input = NoKernelYet<"conv2d_backward_input">(),
    .conv2d_backward_weight = NoKernelYet<"conv2d_backward_weight">(),
    .is_channels_last = NoKernelYet<"is_channels_last">(),
    .max_pool2d = NoKernelYet<"max_pool2d">(),
    .max_pool2d_backward = NoKernelYet<"max_pool2d_backward">(),
    .avg_pool2d = NoKernelYet<"avg_pool2d">(),
    .avg_pool2d_backward = NoKernelYet<"avg_pool2d_backward">(),
    .adaptive_avg_pool2d = NoKernelYet<"adaptive_avg_pool2d">(),
    .adaptive_avg_pool2d_backward = NoKernelYet<"adaptive_avg_pool2d_backward">(),
    .layer_norm = NoKernelYet<"layer_norm">(),
    .layer_norm_backward = NoKernelYet<"layer_norm_backward">(),
    .batch_norm = NoKernelYet<"batch_norm">(),
    .batch_norm_backward = NoKernelYet<"batch_norm_backward">(),
    .softmax = NoKernelYet<"softmax">(),
    .softmax_backward = NoKernelYet<"softmax_backward">(),
    .log_softmax = NoKernelYet<"log_softmax">(),
    .log_softmax_backward = NoKernelYet<"log_softmax_backward">(),
    .cross_entropy_forward = NoKernelYet<"cross_entropy">(),
    .cross_entropy_backward = NoKernelYet<"cross_entropy_backward">(),
    .masked_scale = NoKernelYet<"masked_scale">(),
    .embedding = NoKernelYet<"embedding">(),
    .embedding_backward = NoKernelYet<"embedding_backward">(),
    .embedding_backward_into = NoKernelYet<"embedding_backward_into">(),
    .copy = cuda::copy,
};

}  // namespace weft::kernels
