// The per-device kernel table: the one way ops reach compute. Each device type has one table of
// function pointers (the CPU's holds kernels/cpu's functions); an op looks the table up from its
// first input's device and calls through it, so a backend for another device registers its own
// table and no op file changes. A lookup is an indexed load and a null check, the call an indirect
// call: no map, no string.
//
// The argument and result types are kernels/cpu's (named here, so that ops see no cpu:: name);
// every backend takes and returns the same ones.
//
// Invariants: the CPU's table is registered before main (constant-initialised); a table stays
// alive while registered. Register tables between steps, not while ops run on other threads.
#pragma once
#include <array>
#include <atomic>
#include <optional>
#include <vector>

#include "weft/core/device.h"
#include "weft/core/tensor.h"
#include "weft/kernels/cpu/attention.h"
#include "weft/kernels/cpu/conv.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/kernels/cpu/embedding.h"
#include "weft/kernels/cpu/norm.h"
#include "weft/kernels/cpu/pool.h"
#include "weft/kernels/cpu/reduce.h"
#include "weft/kernels/cpu/softmax.h"

namespace weft::kernels {

using cpu::AttentionForward;
using cpu::AttentionGrads;
using cpu::Binary;
using cpu::Conv2dParams;
using cpu::Conv2dWeightGrads;
using cpu::CrossEntropyForward;
using cpu::MaxPool2dResult;
using cpu::MaxResult;
using cpu::NormBackward;
using cpu::NormForward;
using cpu::Pool2dParams;
using cpu::Unary;

// What each entry computes is documented beside the CPU's function of the same name.
struct KernelTable {
  Tensor (*unary)(Unary op, const Tensor& x);
  Tensor (*binary)(Binary op, const Tensor& a, const Tensor& b);
  Tensor (*binary_scalar)(Binary op, const Tensor& a, double b);
  void (*binary_)(Binary op, Tensor& a, const Tensor& b);
  Tensor (*sum)(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
  Tensor (*sum_to)(const Tensor& x, const Shape& shape);
  MaxResult (*max)(const Tensor& x, int64_t dim, bool keepdim);
  Tensor (*argmax)(const Tensor& x, int64_t dim);
  Tensor (*matmul)(const Tensor& a, const Tensor& b, const Tensor& bias, std::optional<DType> out_dtype);
  Tensor (*fold_rows)(const Tensor& t);
  AttentionForward (*attention_forward)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
  AttentionGrads (*attention_backward)(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, bool causal, double scale);
  Tensor (*decode_attention)(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                             const Tensor& v_cache, const std::vector<int64_t>& slots,
                             const std::vector<int64_t>& lengths, double scale);
  Tensor (*conv2d)(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, bool relu);
  Tensor (*conv2d_backward_input)(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                                  const Conv2dParams& p);
  Conv2dWeightGrads (*conv2d_backward_weight)(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                              bool with_bias, const Conv2dParams& p);
  bool (*is_channels_last)(const Tensor& t);
  MaxPool2dResult (*max_pool2d)(const Tensor& x, const Pool2dParams& p, bool with_workspace);
  Tensor (*max_pool2d_backward)(const Tensor& grad_out, const Tensor& workspace, const Shape& x_shape,
                                const Pool2dParams& p, bool channels_last);
  Tensor (*avg_pool2d)(const Tensor& x, const Pool2dParams& p);
  Tensor (*avg_pool2d_backward)(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p,
                                bool channels_last);
  Tensor (*adaptive_avg_pool2d)(const Tensor& x, std::array<int64_t, 2> output_size);
  Tensor (*adaptive_avg_pool2d_backward)(const Tensor& grad_out, const Shape& x_shape);
  NormForward (*layer_norm)(const Tensor& x, int64_t normalized_numel, const Tensor& weight, const Tensor& bias,
                            double eps);
  NormBackward (*layer_norm_backward)(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, bool need_dweight, bool need_dbias);
  NormForward (*batch_norm)(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool use_batch_stats, double momentum,
                            double eps);
  NormBackward (*batch_norm_backward)(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, bool used_batch_stats, bool need_dweight,
                                      bool need_dbias);
  Tensor (*softmax)(const Tensor& x, int64_t dim);
  Tensor (*softmax_backward)(const Tensor& grad_y, const Tensor& y, int64_t dim);
  Tensor (*log_softmax)(const Tensor& x, int64_t dim);
  Tensor (*log_softmax_backward)(const Tensor& grad_y, const Tensor& y, int64_t dim);
  CrossEntropyForward (*cross_entropy_forward)(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                               double label_smoothing);
  Tensor (*cross_entropy_backward)(const Tensor& grad_loss, double scale, const Tensor& logits, const Tensor& target,
                                   const Tensor& lse, int64_t ignore_index, double label_smoothing);
  Tensor (*masked_scale)(const Tensor& x, const Tensor& keep, double scale);
  Tensor (*embedding)(const Tensor& indices, const Tensor& weight);
  Tensor (*embedding_backward)(const Tensor& grad_out, const Tensor& indices, int64_t V, int64_t D);
  bool (*embedding_backward_into)(Tensor& gathered, const Tensor& grad_out, const Tensor& indices);
  // dst = src, elementwise, where dst is on this table's device and src on it or on the CPU (or
  // the other way round): Tensor::to(Device)'s copy.
  void (*copy)(Tensor& dst, const Tensor& src);
};

// kernels/cpu's functions.
extern const KernelTable cpu_kernels;
#ifdef WEFT_CUDA
// kernels/cuda's functions, registered for Device::Type::cuda before main.
extern const KernelTable cuda_kernels;
#endif

namespace detail {
inline constexpr size_t kDeviceTypes = 2;  // Device::Type's values
extern std::atomic<const KernelTable*> tables[kDeviceTypes];
[[noreturn]] void throw_unregistered(Device device);
}  // namespace detail

// The table of `device`'s type; a DeviceError naming the device and the registered types when it
// has none.
inline const KernelTable& of(Device device) {
  const KernelTable* table = detail::tables[static_cast<size_t>(device.type)].load(std::memory_order_relaxed);
  if (!table) [[unlikely]]
    detail::throw_unregistered(device);
  return *table;
}
// An undefined tensor goes to the CPU's kernels, whose checks name what is missing.
inline const KernelTable& of(const Tensor& t) { return of(t.defined() ? t.device() : Device::cpu()); }

// Makes `table` (null: none) the kernels of device type `type`; returns the table it replaces.
const KernelTable* register_kernels(Device::Type type, const KernelTable* table);

}  // namespace weft::kernels
