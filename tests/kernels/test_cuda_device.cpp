// The CUDA backend's device memory (kernels/cuda/device.h). Where weft is built without it, or
// the machine has no GPU, the tests that need one skip, saying why; without a GPU a request for
// device memory must still say why it cannot be met.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/core/allocator.h"
#include "weft/core/tensor.h"
#ifdef WEFT_CUDA
#include "weft/kernels/cuda/device.h"
#endif

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

#ifdef WEFT_CUDA

TEST(CudaDevice, DeviceMemoryWithoutAGpuIsRefusedSayingWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is here; the tests below use it";
  const std::string message = message_of<DeviceError>([] { Tensor::empty({4}, DType::f32, Device::cuda()); });
  EXPECT_TRUE(contains(message, "cannot allocate on cuda:0: ")) << message;
  EXPECT_TRUE(contains(message, cuda::unavailable_reason())) << message << " | " << cuda::unavailable_reason();
  EXPECT_EQ(cuda::allocator().stats().reserved_bytes, 0);
}

// No kernel table is registered for CUDA yet: a copy to the device is refused naming it.
TEST(CudaDevice, NoKernelsYetSoACopyToTheDeviceIsRefusedNamingIt) {
  const std::string message = message_of<DeviceError>([] { Tensor::zeros({4}).to(Device::cuda()); });
  EXPECT_TRUE(contains(message, "cuda")) << message;
}

// As the CPU's: a freed tensor's block stays cached for the next, empty_cache() returns it, and a
// request the device cannot meet is an out-of-memory error naming the device.
TEST(CudaDevice, TensorsTakeDeviceMemoryThroughTheCachingAllocator) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  CachingAllocator& memory = cuda::allocator();
  memory.empty_cache();
  const MemoryStats before = memory.stats();
  const int64_t host_before = CachingAllocator::cpu().stats().allocated_bytes;
  {
    const Tensor t = Tensor::empty({1024, 1024}, DType::f32, Device::cuda());
    EXPECT_EQ(t.device(), Device::cuda());
    EXPECT_EQ(memory.stats().allocated_bytes - before.allocated_bytes, 4 << 20);
    EXPECT_EQ(CachingAllocator::cpu().stats().allocated_bytes, host_before) << "device memory, not the host's";
  }
  EXPECT_EQ(memory.stats().allocated_bytes, before.allocated_bytes);
  EXPECT_GE(memory.stats().reserved_bytes - before.reserved_bytes, 4 << 20);
  { const Tensor again = Tensor::empty({1024, 1024}, DType::f32, Device::cuda()); }
  EXPECT_EQ(memory.stats().cache_hits - before.cache_hits, 1);
  memory.empty_cache();
  EXPECT_EQ(memory.stats().reserved_bytes, before.reserved_bytes);
  const std::string message =
      message_of<OutOfMemoryError>([] { Tensor::empty({int64_t{1} << 40}, DType::f32, Device::cuda()); });
  EXPECT_TRUE(contains(message, "cuda:0 could not supply a 4.00 TiB segment")) << message;
}

#else

TEST(CudaDevice, NotInThisBuild) {
  GTEST_SKIP() << "weft was built without its CUDA backend (no CUDA toolkit found, or -DWEFT_CUDA=OFF)";
}

#endif

}  // namespace
}  // namespace weft
