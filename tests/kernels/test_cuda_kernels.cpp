// kernels/cuda against kernels/cpu on the same inputs, with a tolerance per dtype. Without a GPU
// (or without the CUDA backend in this build) the tests that need one skip, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/core/tensor.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/kernels/kernel_table.h"
#ifdef WEFT_CUDA
#include "weft/kernels/cuda/device.h"
#endif

namespace weft {
namespace {

using cpu::Binary;
using cpu::Unary;
using testing::contains;
using testing::message_of;

#ifdef WEFT_CUDA

#define SKIP_WITHOUT_A_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

const kernels::KernelTable& gpu() { return kernels::of(Device::cuda()); }
Tensor to_gpu(const Tensor& t) { return t.to(Device::cuda()); }
Tensor to_host(const Tensor& t) { return t.to(Device::cpu()); }

// The error a dtype's rounding allows between two computations of one formula in f32 (or f64):
// half an ulp of the stored result, twice over, plus what libm and CUDA's math differ by.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-6;
    case DType::f16: return 2e-3;
    default: return 1.6e-2;  // bf16
  }
}

void expect_close(const Tensor& gpu_result, const Tensor& cpu_result, const std::string& what) {
  ASSERT_EQ(gpu_result.device(), Device::cuda()) << what;
  const Tensor host = to_host(gpu_result);
  ASSERT_EQ(host.shape(), cpu_result.shape()) << what;
  ASSERT_EQ(host.dtype(), cpu_result.dtype()) << what;
  const std::vector<double> got = host.to_vector<double>(), want = cpu_result.to_vector<double>();
  const double tol = tolerance(cpu_result.dtype());
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool close = both_nan || got[i] == want[i] || std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!close && reported++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " on the GPU, " << want[i] << " on the CPU";
  }
}

// Uniform inputs in [lo, hi) of `dtype`.
Tensor inputs(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed) {
  Generator gen(seed);
  const Tensor unit = Tensor::rand(shape, gen, DType::f64);
  return cpu::binary(Binary::add, cpu::binary(Binary::mul, unit, hi - lo), lo).to(dtype);
}

constexpr DType kFloating[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

TEST(CudaKernels, CopiesEveryDtypeToTheDeviceAndBack) {
  SKIP_WITHOUT_A_GPU();
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::i8, DType::u8,
                      DType::boolean}) {
    const Tensor x = inputs({5, 7}, DType::f64, -50, 50, 1).to(dtype);
    const Tensor there = to_gpu(x);
    EXPECT_EQ(there.device(), Device::cuda());
    EXPECT_EQ(to_host(there).to_vector<double>(), x.to_vector<double>()) << dtype_name(dtype);
    // A transposed view goes over as its values, not its bytes.
    EXPECT_EQ(to_host(to_gpu(x.t())).to_vector<double>(), x.t().contiguous().to_vector<double>()) << dtype_name(dtype);
  }
}

TEST(CudaKernels, ConvertsAndBroadcastsAsTheCpuCopyDoes) {
  SKIP_WITHOUT_A_GPU();
  const Tensor row = inputs({1, 6}, DType::f32, -3e5, 3e5, 2);
  for (DType to : {DType::f64, DType::f16, DType::bf16, DType::i32, DType::i8, DType::u8, DType::boolean}) {
    Tensor want = Tensor::empty({4, 6}, to);
    want.copy_(row);
    // Host to device, device to device, and device to host, each converting.
    Tensor on_device = Tensor::empty({4, 6}, to, Device::cuda());
    gpu().copy(on_device, row);
    EXPECT_EQ(to_host(on_device).to_vector<double>(), want.to_vector<double>()) << "host f32 -> " << dtype_name(to);
    Tensor converted = Tensor::empty({4, 6}, to, Device::cuda());
    gpu().copy(converted, to_gpu(row));
    EXPECT_EQ(to_host(converted).to_vector<double>(), want.to_vector<double>()) << "f32 -> " << dtype_name(to);
    Tensor back = Tensor::empty({6, 4}, DType::f32).t();
    gpu().copy(back, converted);
    Tensor want_back = Tensor::empty({4, 6}, DType::f32);
    want_back.copy_(want);
    EXPECT_EQ(back.to_vector<double>(), want_back.to_vector<double>()) << dtype_name(to) << " -> host f32";
  }
}

TEST(CudaKernels, UnaryOpsMatchTheCpu) {
  SKIP_WITHOUT_A_GPU();
  for (DType dtype : kFloating)
    for (int op = 0; op <= static_cast<int>(Unary::square); ++op) {
      const Unary u = static_cast<Unary>(op);
      const bool positive = u == Unary::log || u == Unary::sqrt;
      const Tensor x = inputs({33, 65}, dtype, positive ? 0.05 : -4, 4, 3 + op);
      expect_close(gpu().unary(u, to_gpu(x)), cpu::unary(u, x), str(cpu::unary_name(u), " ", dtype_name(dtype)));
      expect_close(gpu().unary(u, to_gpu(x).t()), cpu::unary(u, x.t()), str(cpu::unary_name(u), " of a transpose"));
    }
}

TEST(CudaKernels, BinaryOpsMatchTheCpuBroadcastAndInPlace) {
  SKIP_WITHOUT_A_GPU();
  for (DType dtype : kFloating)
    for (int op = 0; op <= static_cast<int>(Binary::lt); ++op) {
      const Binary b = static_cast<Binary>(op);
      const std::string what = str(cpu::binary_name(b), " ", dtype_name(dtype));
      const double lo = b == Binary::pow ? 0.1 : -3;
      const Tensor x = inputs({17, 40}, dtype, lo, 3, 100 + op), y = inputs({17, 40}, dtype, lo, 3, 200 + op);
      const Tensor column = inputs({17, 1}, dtype, 0.5, 2, 300 + op);
      expect_close(gpu().binary(b, to_gpu(x), to_gpu(y)), cpu::binary(b, x, y), what);
      expect_close(gpu().binary(b, to_gpu(x), to_gpu(column)), cpu::binary(b, x, column), what + " by a column");
      expect_close(gpu().binary(b, to_gpu(y.t()), to_gpu(x.t())), cpu::binary(b, y.t(), x.t()), what + " transposed");
      expect_close(gpu().binary_scalar(b, to_gpu(x), 1.7), cpu::binary(b, x, 1.7), what + " by a scalar");
      Tensor in_place = to_gpu(x), want = x.clone();
      gpu().binary_(b, in_place, to_gpu(column));
      cpu::binary_(b, want, column);
      expect_close(in_place, want, what + " in place");
    }
}

TEST(CudaKernels, MixedDevicesAndDtypesAreRefusedNamingBoth) {
  SKIP_WITHOUT_A_GPU();
  const Tensor x = Tensor::ones({3});
  std::string message = message_of<DeviceError>([&] { gpu().binary(Binary::add, to_gpu(x), x); });
  EXPECT_TRUE(contains(message, "expected a tensor on cuda:0, got one on cpu")) << message;
  message = message_of<DTypeError>([&] { gpu().binary(Binary::add, to_gpu(x), to_gpu(x.to(DType::bf16))); });
  EXPECT_TRUE(contains(message, "dtypes differ: f32 [3] vs bf16 [3]")) << message;
  message = message_of<DTypeError>([&] { gpu().unary(Unary::exp, to_gpu(x.to(DType::i32))); });
  EXPECT_TRUE(contains(message, "expected a floating-point tensor, got i32")) << message;
}

// Needs no GPU: the table's entries without a kernel throw before touching any tensor.
TEST(CudaKernels, AnOpWithoutAKernelNamesItself) {
  const std::string message =
      message_of<DeviceError>([] { gpu().matmul(Tensor(), Tensor(), Tensor(), std::nullopt); });
  EXPECT_TRUE(contains(message, "matmul has no CUDA kernel yet")) << message;
}

#else

TEST(CudaKernels, NotInThisBuild) {
  GTEST_SKIP() << "weft was built without its CUDA backend (no CUDA toolkit found, or -DWEFT_CUDA=OFF)";
}

#endif

}  // namespace
}  // namespace weft
