#include "weft/kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include "weft/core/error.h"

namespace weft::cuda {

namespace {

// The runtime's error for a call that failed, cleared so that it does not stick to the next call.
std::string error_text(cudaError_t error) {
  cudaGetLastError();
  return str(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

void* reserve(size_t nbytes) {
  void* segment = nullptr;
  const cudaError_t error = cudaMalloc(&segment, nbytes);
  if (error == cudaSuccess) return segment;
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;  // the allocator releases its cache and reports out of memory
  }
  throw DeviceError(str("cannot allocate on cuda:0: ", error_text(error)));
}

void release(void* segment) { cudaFree(segment); }

}  // namespace

int device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return error_text(error);
  return count == 0 ? "the CUDA runtime found no device" : "";
}

CachingAllocator& allocator() {
  // Leaked on purpose, as the CPU's: tensors destroyed during static destruction still find it.
  static CachingAllocator* const instance =
      new CachingAllocator(SegmentSource{.reserve = reserve, .release = release, .where = "cuda:0"});
  return *instance;
}

}  // namespace weft::cuda
