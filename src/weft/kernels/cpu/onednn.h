// The bridge to oneDNN: one CPU engine and stream for the process, and memory descriptors that
// describe a weft Tensor exactly (dims, element strides, dtype), so oneDNN reads transposed or
// otherwise strided tensors in place instead of weft copying them first.
//
// Re-creating a primitive for a shape seen before hits oneDNN's own cache but still costs a few
// microseconds (descriptor + lookup), more than a small GEMM: matmul keeps its own small
// per-thread cache of primitives (kernels/cpu/matmul.cpp); conv and pool rebuild theirs.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include "weft/core/tensor.h"
#include "weft/kernels/cpu/layout.h"

namespace weft::cpu::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // in-order; execute() calls are followed by stream().wait()

bool supports(DType t);  // f32, bf16, f16, i8, u8, i32
dnnl::memory::data_type data_type(DType t);
dnnl::memory::desc desc(const Tensor& t);                                    // t's dims and strides
dnnl::memory::desc desc(const Tensor& t, const dnnl::memory::dims& dims);    // reinterpreted dims, dense
dnnl::memory memory(const Tensor& t);                                        // wraps t's bytes
dnnl::memory memory(const dnnl::memory::desc& d, const Tensor& t);

// The descriptor of a channels-last tensor (kernels/cpu/layout.h) of shape `nchw`.
dnnl::memory::desc channels_last_desc(const Shape& nchw, DType dtype);

// How this CPU runs bf16 GEMMs and convolutions, as oneDNN dispatches them: with bf16 instructions
// (AVX512-BF16, AMX), emulated with AVX-512 (correct but slower than f32), or not at all (oneDNN
// 2.6 has no bf16 kernels below AVX-512).
enum class Bf16Support { native, emulated, none };
Bf16Support bf16_support();

// Whether oneDNN computes GEMMs, convolutions and pooling in `t` on this CPU. Where it does not
// (f16 on every CPU in oneDNN 2.6; bf16 below AVX-512) the kernels widen the operands to f32,
// compute, and round the result back once: the same f32 accumulation as oneDNN's own bf16
// kernels, equal up to the order of the sums, and slower than staying in f32.
bool computes_in(DType t);

// Whether oneDNN's int8 kernels on this CPU add u8 x s8 products in pairs into 16 bits (without
// AVX512-VNNI or AVX-VNNI: vpmaddubsw), which saturates once a pair's sum passes 32767.
bool int8_pairs_saturate();

}  // namespace weft::cpu::onednn
