#include "weft/kernels/kernel_table.h"

#include <string>

#include "weft/core/error.h"
#include "weft/kernels/cpu/layout.h"
#include "weft/kernels/cpu/matmul.h"
#ifdef WEFT_CUDA
#include "weft/kernels/cuda/device.h"
#endif

namespace weft::kernels {

// Lambdas where kernels/cpu overloads a name or gives defaults.
const KernelTable cpu_kernels = {
    .unary = cpu::unary,
    .binary = [](Binary op, const Tensor& a, const Tensor& b) { return cpu::binary(op, a, b); },
    .binary_scalar = [](Binary op, const Tensor& a, double b) { return cpu::binary(op, a, b); },
    .binary_ = cpu::binary_,
    .sum = cpu::sum,
    .sum_to = cpu::sum_to,
    .max = cpu::max,
    .argmax = cpu::argmax,
    .matmul = cpu::matmul,
    .fold_rows = cpu::fold_rows,
    .attention_forward = cpu::attention_forward,
    .attention_backward = cpu::attention_backward,
    .decode_attention = cpu::decode_attention,
    .conv2d = cpu::conv2d,
    .conv2d_backward_input = cpu::conv2d_backward_input,
    .conv2d_backward_weight = cpu::conv2d_backward_weight,
    .is_channels_last = cpu::is_channels_last,
    .max_pool2d = cpu::max_pool2d,
    .max_pool2d_backward = cpu::max_pool2d_backward,
    .avg_pool2d = cpu::avg_pool2d,
    .avg_pool2d_backward = cpu::avg_pool2d_backward,
    .adaptive_avg_pool2d = cpu::adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = cpu::adaptive_avg_pool2d_backward,
    .layer_norm = cpu::layer_norm,
    .layer_norm_backward = cpu::layer_norm_backward,
    .batch_norm = cpu::batch_norm,
    .batch_norm_backward = cpu::batch_norm_backward,
    .softmax = cpu::softmax,
    .softmax_backward = cpu::softmax_backward,
    .log_softmax = cpu::log_softmax,
    .log_softmax_backward = cpu::log_softmax_backward,
    .cross_entropy_forward = cpu::cross_entropy_forward,
    .cross_entropy_backward = cpu::cross_entropy_backward,
    .masked_scale = cpu::masked_scale,
    .embedding = cpu::embedding,
    .embedding_backward = cpu::embedding_backward,
    .embedding_backward_into = cpu::embedding_backward_into,
    .copy = [](Tensor& dst, const Tensor& src) { dst.copy_(src); },
};

#ifdef WEFT_CUDA
// Device memory for Device::Type::cuda, registered before main as the CPU's kernels are.
[[maybe_unused]] const bool cuda_memory_registered =
    (register_allocator(Device::Type::cuda, &cuda::allocator()), true);
#endif

namespace detail {

#ifdef WEFT_CUDA
constinit std::atomic<const KernelTable*> tables[kDeviceTypes] = {&cpu_kernels, &cuda_kernels};
#else
constinit std::atomic<const KernelTable*> tables[kDeviceTypes] = {&cpu_kernels, nullptr};
#endif

void throw_unregistered(Device device) {
  std::string registered;
  for (size_t type = 0; type < kDeviceTypes; ++type)
    if (tables[type].load(std::memory_order_relaxed))
      registered += std::string(registered.empty() ? "" : ", ") + Device::type_name(static_cast<Device::Type>(type));
  throw DeviceError(str("no kernels are registered for ", device.name(), " (registered: ",
                        registered.empty() ? "none" : registered, ")"));
}

}  // namespace detail

const KernelTable* register_kernels(Device::Type type, const KernelTable* table) {
  return detail::tables[static_cast<size_t>(type)].exchange(table);
}

}  // namespace weft::kernels
