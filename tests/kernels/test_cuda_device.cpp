// The CUDA backend's device memory (kernels/cuda/device.h). Where weft is built without it, or
// the machine has no GPU, the tests that need one skip, saying why; without a GPU a request for
// device memory must still say why it cannot be met.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/core/allocator.h"
#include "weft/core/storage.h"
#include "weft/core/tensor.h"

#include <functional>
#include <memory>
#include <vector>
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

// Without a GPU, a copy to the device is refused as the memory it needs is.
TEST(CudaDevice, ACopyToTheDeviceWithoutAGpuIsRefusedSayingWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is here; test_cuda_kernels.cpp copies to it";
  const std::string message = message_of<DeviceError>([] { Tensor::zeros({4}).to(Device::cuda()); });
  EXPECT_TRUE(contains(message, "cannot allocate on cuda:0: ")) << message;
}

// One allocator per device type: a second device's tensors are refused, not served from the first's.
TEST(CudaDevice, OnlyDeviceZeroSoFar) {
  const std::string message = message_of<DeviceError>([] { Tensor::empty({4}, DType::f32, Device::cuda(1)); });
  EXPECT_TRUE(contains(message, "cannot allocate on cuda:1: weft uses only device 0 of cuda so far")) << message;
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

// core's loops read host memory: given a tensor whose storage says it is on a device (here host
// bytes labelled cuda:0, so that no GPU is needed), each refuses rather than reads it.
TEST(CudaDevice, HostReadsOfDeviceTensorsAreRefused) {
  auto bytes = std::make_shared<std::vector<float>>(4, 1.0f);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(bytes->data(), 16, bytes, Device::cuda());
  impl->shape = {4};
  impl->strides = {1};
  impl->dtype = DType::f32;
  Tensor on_device(impl);
  Tensor host = Tensor::zeros({4});
  for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"data<f32>()", [&] { on_device.data<float>(); }},
           {"fill_", [&] { on_device.fill_(2); }},
           {"copy_", [&] { on_device.copy_(host); }},
           {"copy_", [&] { host.copy_(on_device); }},
           {"at", [&] { on_device.at({0}); }},
       }) {
    const std::string message = message_of<DeviceError>(call);
    EXPECT_TRUE(contains(message, what)) << message;
    EXPECT_TRUE(contains(message, "on cuda:0")) << message;
    EXPECT_TRUE(contains(message, ".to(Device::cpu())")) << message;
  }
  EXPECT_EQ(*bytes, std::vector<float>(4, 1.0f)) << "nothing written";
}

}  // namespace
}  // namespace weft
