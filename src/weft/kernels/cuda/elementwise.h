// Elementwise kernels on a CUDA device: the copy behind Tensor::to(Device), and the unary and
// binary ops of kernels/cpu/elementwise.h with the same contract (NumPy broadcasting, both inputs
// of one floating dtype, f16 and bf16 computed in f32 and rounded once on store, f64 in f64).
// Each is checked against the CPU's kernel on the same inputs (tests/kernels/test_cuda_kernels.cpp).
//
// Every tensor passed is on the device except one side of a copy, which may be on the host; a
// tensor on the host where the device is expected, or on another device, is a DeviceError. Kernels
// run on the default stream, and a copy to the host returns when its bytes are there.
#pragma once
#include "weft/core/tensor.h"
#include "weft/kernels/cpu/elementwise.h"

namespace weft::cuda {

// dst = src elementwise, src broadcast to dst's shape and converted to dst's dtype, where either
// may be on the host (one transfer of the bytes, staged contiguous on whichever side converts).
void copy(Tensor& dst, const Tensor& src);

Tensor unary(cpu::Unary op, const Tensor& x);
Tensor binary(cpu::Binary op, const Tensor& a, const Tensor& b);
Tensor binary(cpu::Binary op, const Tensor& a, double b);  // b as a scalar of a's dtype
void binary_(cpu::Binary op, Tensor& a, const Tensor& b);   // a op= b, b broadcast to a's shape

}  // namespace weft::cuda
