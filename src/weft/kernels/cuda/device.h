// The CUDA backend's runtime: which devices this process sees, and device memory through the
// caching allocator (core/allocator.h), its segments from cudaMalloc, with the CPU allocator's
// statistics, trace, limit and out-of-memory report. Built when CMake finds the CUDA toolkit
// (WEFT_CUDA; -DWEFT_CUDA=OFF leaves it out); kernels/kernel_table.cpp registers the allocator
// for Device::Type::cuda before main, so that Tensor::empty(shape, dtype, Device::cuda()) takes
// device memory.
//
// Without a driver or a device nothing fails until device memory is asked for; that request is a
// DeviceError saying why (the runtime's own words). A segment cudaMalloc cannot supply is an
// out-of-memory error naming the device, after the cache is released once.
//
// Device 0 only so far: the allocator is the one registry entry for the type (issue #30 adds a
// device index to the registry along with the kernels).
#pragma once
#include <string>

#include "weft/core/allocator.h"

namespace weft::cuda {

// The devices this process can use; 0 with no driver or no device.
int device_count();
// Why device_count() is 0, in the runtime's words; "" when it is not.
std::string unavailable_reason();
// Device 0's caching allocator.
CachingAllocator& allocator();

}  // namespace weft::cuda
