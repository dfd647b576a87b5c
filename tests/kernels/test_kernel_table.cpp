// The device seam: ops reach kernels only through the per-device kernel table, storage comes from
// the allocator registered for the device type, and Tensor::to(Device) moves between devices.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "expect_error.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/kernels/kernel_table.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"

namespace weft {
namespace {

using kernels::KernelTable;
using testing::message_of;

// Calls per entry of the counting table, by entry name.
std::map<std::string, int64_t> calls;

template <auto Entry, typename F>
struct Counted;
template <auto Entry, typename R, typename... A>
struct Counted<Entry, R (*)(A...)> {
  static inline const char* name = nullptr;
  static R call(A... args) {
    ++calls[name];
    return (kernels::cpu_kernels.*Entry)(std::forward<A>(args)...);
  }
};

// A backend that counts each call and runs the CPU's kernel: what a second device's table looks
// like to the ops. `entries` is how many it wraps, to compare against the table's size.
KernelTable counting_table(size_t& entries) {
  KernelTable table{};
  entries = 0;
#define WEFT_COUNT(entry)                                                                   \
  Counted<&KernelTable::entry, decltype(KernelTable::entry)>::name = #entry;                \
  table.entry = Counted<&KernelTable::entry, decltype(KernelTable::entry)>::call;           \
  ++entries;
  WEFT_COUNT(unary) WEFT_COUNT(binary) WEFT_COUNT(binary_scalar) WEFT_COUNT(binary_) WEFT_COUNT(sum)
  WEFT_COUNT(sum_to) WEFT_COUNT(max) WEFT_COUNT(argmax) WEFT_COUNT(matmul) WEFT_COUNT(fold_rows)
  WEFT_COUNT(attention_forward) WEFT_COUNT(attention_backward) WEFT_COUNT(decode_attention) WEFT_COUNT(conv2d)
  WEFT_COUNT(conv2d_backward_input) WEFT_COUNT(conv2d_backward_weight) WEFT_COUNT(is_channels_last)
  WEFT_COUNT(max_pool2d) WEFT_COUNT(max_pool2d_backward) WEFT_COUNT(avg_pool2d) WEFT_COUNT(avg_pool2d_backward)
  WEFT_COUNT(adaptive_avg_pool2d) WEFT_COUNT(adaptive_avg_pool2d_backward) WEFT_COUNT(layer_norm)
  WEFT_COUNT(layer_norm_backward) WEFT_COUNT(batch_norm) WEFT_COUNT(batch_norm_backward) WEFT_COUNT(softmax)
  WEFT_COUNT(softmax_backward) WEFT_COUNT(log_softmax) WEFT_COUNT(log_softmax_backward)
  WEFT_COUNT(cross_entropy_forward) WEFT_COUNT(cross_entropy_backward) WEFT_COUNT(masked_scale)
  WEFT_COUNT(embedding)
  WEFT_COUNT(embedding_backward) WEFT_COUNT(embedding_backward_into) WEFT_COUNT(copy)
#undef WEFT_COUNT
  return table;
}

// Installs a table for a device type while it lives, and puts the previous one back.
class RegisteredKernels {
 public:
  RegisteredKernels(Device::Type type, const KernelTable* table)
      : type_(type), previous_(kernels::register_kernels(type, table)) {}
  ~RegisteredKernels() { kernels::register_kernels(type_, previous_); }

 private:
  Device::Type type_;
  const KernelTable* previous_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

struct StepResult {
  Tensor loss;
  std::vector<Tensor> parameters;
};

// One training step, built from `seed`: forward, loss, backward, the optimizer's update.
template <typename MakeModel, typename MakeOptimizer>
StepResult train_step(uint64_t seed, MakeModel make_model, MakeOptimizer make_optimizer, const Tensor& input,
                      const Tensor& target) {
  manual_seed(seed);
  auto model = make_model();
  auto optimizer = make_optimizer(model->parameters());
  Tensor logits = (*model)(input);
  Tensor loss = cross_entropy(logits.view({-1, logits.size(-1)}), target);
  loss.backward();
  optimizer->step();
  StepResult result{loss.detach(), {}};
  for (const Tensor& p : model->parameters()) result.parameters.push_back(p.detach().clone());
  return result;
}

// Runs the step on the CPU's table and again on the counting one; the two must agree to the bit,
// and every entry in `expected` must have been called.
template <typename MakeModel, typename MakeOptimizer>
void expect_step_goes_through_the_table(MakeModel make_model, MakeOptimizer make_optimizer, const Tensor& input,
                                        const Tensor& target, const std::vector<std::string>& expected) {
  const StepResult plain = train_step(7, make_model, make_optimizer, input, target);
  size_t entries = 0;
  const KernelTable counting = counting_table(entries);
  ASSERT_EQ(entries * sizeof(void (*)()), sizeof(KernelTable)) << "the counting table misses an entry";
  calls.clear();
  StepResult counted;
  {
    RegisteredKernels guard(Device::Type::cpu, &counting);
    counted = train_step(7, make_model, make_optimizer, input, target);
  }
  for (const std::string& entry : expected) EXPECT_GT(calls[entry], 0) << entry << " was not called through the table";
  EXPECT_TRUE(same_bits(plain.loss, counted.loss));
  ASSERT_EQ(plain.parameters.size(), counted.parameters.size());
  for (size_t i = 0; i < plain.parameters.size(); ++i)
    EXPECT_TRUE(same_bits(plain.parameters[i], counted.parameters[i])) << "parameter " << i;
}

Tensor labels(const std::vector<int64_t>& values) { return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}); }

TEST(KernelTable, AnMlpStepGoesThroughTheTable) {
  manual_seed(1);
  const Tensor images = Tensor::randn({4, 1, 28, 28});
  expect_step_goes_through_the_table(
      [] { return nn::make_mlp(); }, [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1); },
      images, labels({3, 1, 4, 1}),
      {"fold_rows", "matmul", "unary", "binary", "sum", "cross_entropy_forward", "cross_entropy_backward"});
}

TEST(KernelTable, ACnnStepGoesThroughTheTable) {
  manual_seed(2);
  const Tensor images = Tensor::randn({2, 1, 28, 28});
  expect_step_goes_through_the_table(
      [] { return nn::make_cnn(); }, [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1); },
      images, labels({5, 9}),
      {"conv2d", "conv2d_backward_input", "conv2d_backward_weight", "max_pool2d", "max_pool2d_backward",
       "is_channels_last", "fold_rows", "matmul", "binary", "cross_entropy_forward", "cross_entropy_backward"});
}

TEST(KernelTable, AGptStepGoesThroughTheTable) {
  const nn::GPTConfig config{.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 23};
  std::vector<int64_t> ids, next;
  for (int64_t i = 0; i < 16; ++i) {
    ids.push_back((i * 5) % 23);
    next.push_back((i * 5 + 1) % 23);
  }
  expect_step_goes_through_the_table(
      [&] { return std::make_shared<nn::GPT>(config); },
      [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p); },
      Tensor::from_vector(ids, {2, 8}), labels(next),
      {"embedding", "embedding_backward", "layer_norm", "layer_norm_backward", "fold_rows", "matmul", "attention_forward", "attention_backward",
       "unary", "binary", "sum", "cross_entropy_forward", "cross_entropy_backward"});
}

TEST(KernelTable, AnUnregisteredDeviceIsADeviceErrorNamingWhatIsRegistered) {
  RegisteredKernels none(Device::Type::cuda, nullptr);  // a build with CUDA registers its table
  const Device gpu{Device::Type::cuda, 0};
  const std::string message = message_of<DeviceError>([&] { Tensor::ones({2}).to(gpu); });
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("registered: cpu"), std::string::npos) << message;
  EXPECT_NE(message_of<DeviceError>([&] { Tensor::empty({2}, DType::f32, gpu); }).find("cuda"), std::string::npos);
}

// An undefined tensor has no device: it goes to the CPU's kernels, which refuse it as before.
TEST(KernelTable, AnUndefinedInputIsStillTheKernelsValueError) {
  EXPECT_THROW(relu(Tensor()), ValueError);
  EXPECT_THROW(neg(Tensor()), ValueError);
}

TEST(KernelTable, ToTheSameDeviceIsTheTensorItself) {
  const Tensor x = Tensor::ones({3});
  EXPECT_EQ(x.to(Device::cpu()).impl(), x.impl());
}

// A second device whose memory is host memory from its own allocator and whose copy is a memcpy
// (core's copy_ refuses a device's tensors): enough to see to() allocate there, copy through that
// device's table, and come back.
TEST(KernelTable, ToASecondDeviceUsesItsAllocatorAndItsTable) {
  CachingAllocator device_memory;
  size_t entries = 0;
  KernelTable counting = counting_table(entries);
  counting.copy = [](Tensor& dst, const Tensor& src) {
    const Tensor dense = src.device().is_cpu() ? src.contiguous_untracked() : src;
    ASSERT_TRUE(dst.is_contiguous() && dense.is_contiguous() && dst.dtype() == src.dtype());
    std::memcpy(dst.data_ptr(), dense.data_ptr(), dense.nbytes());
    ++calls["copy"];
  };
  RegisteredKernels guard(Device::Type::cuda, &counting);
  CachingAllocator* previous = register_allocator(Device::Type::cuda, &device_memory);
  const Device gpu{Device::Type::cuda, 0};
  calls.clear();
  {
    Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
    x.requires_grad_();
    Tensor on_gpu = x.to(gpu);
    EXPECT_EQ(on_gpu.device(), gpu);
    EXPECT_GT(device_memory.stats().allocated_bytes, 0);
    Tensor back = on_gpu.to(Device::cpu());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_TRUE(same_bits(back, x.detach()));
    EXPECT_EQ(calls["copy"], 2);
    sum(back).backward();  // the gradient comes back through both copies
    EXPECT_TRUE(same_bits(x.grad(), Tensor::ones({3})));
  }
  EXPECT_EQ(device_memory.stats().allocated_bytes, 0);
  register_allocator(Device::Type::cuda, previous);
}

}  // namespace
}  // namespace weft
