#include "weft/ops/autocast.h"

#include <utility>

namespace weft {

namespace {

// lower: cast to the low type. f32: 16-bit inputs are cast to f32. f32_inside: 16-bit inputs go
// in as they are, because the kernel reads them into f32 and accumulates in f32 itself (a cast
// would only add a round trip through memory: 50k-class logits are the largest activation of a
// GPT step).
enum class Policy { lower, f32, f32_inside };

// The one table of the autocast policy (mirrored in docs/mixed-precision.md).
constexpr std::pair<std::string_view, Policy> kPolicy[] = {
    {"matmul", Policy::lower},      {"linear", Policy::lower},       {"conv2d", Policy::lower},
    {"scaled_dot_product_attention", Policy::lower},
    {"softmax", Policy::f32},       {"log_softmax", Policy::f32},    {"exp", Policy::f32},
    {"log", Policy::f32},           {"pow", Policy::f32},            {"sqrt", Policy::f32},
    {"layer_norm", Policy::f32},    {"batch_norm", Policy::f32},     {"cross_entropy", Policy::f32_inside},
    {"mse_loss", Policy::f32},      {"sum", Policy::f32},
};

Policy policy_of(std::string_view op) {
  for (const auto& [name, policy] : kPolicy)
    if (name == op) return policy;
  throw ValueError(str("autocast: op '", op, "' has no entry in the autocast policy table (ops/autocast.cpp)"));
}

// The dtype `op` wants t in, or nullopt when t goes in as it is.
std::optional<DType> target_dtype(std::string_view op, const Tensor& t) {
  const std::optional<DType> current = autocast_dtype();
  if (!current) return std::nullopt;
  Policy policy = policy_of(op);
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::f64 || policy == Policy::f32_inside)
    return std::nullopt;
  return policy == Policy::lower ? *current : DType::f32;
}

}  // namespace

Tensor autocast(std::string_view op, const Tensor& t) {
  const std::optional<DType> target = target_dtype(op, t);
  return target ? t.to(*target) : t;
}

Tensor autocast_operand(std::string_view op, const Tensor& t) {
  const std::optional<DType> target = target_dtype(op, t);
  if (!target || *target == t.dtype()) return t;
  if (const Tensor* copy = AutocastCopies::find(t, *target)) return *copy;
  return t.detach().to(*target);
}

namespace {
thread_local const AutocastCopies* innermost_copies = nullptr;
}  // namespace

AutocastCopies::AutocastCopies(const std::vector<Tensor>& tensors, const std::vector<Tensor>& copies)
    : enclosing_(innermost_copies) {
  WEFT_CHECK(copies.empty() || copies.size() == tensors.size(), ValueError, "AutocastCopies: ", copies.size(),
             " copies for ", tensors.size(), " tensors");
  for (size_t i = 0; i < copies.size(); ++i) {
    if (!copies[i].defined()) continue;
    WEFT_CHECK(copies[i].shape() == tensors[i].shape(), ShapeError, "AutocastCopies: copy ", i, " is ",
               shape_str(copies[i].shape()), " but its tensor is ", shape_str(tensors[i].shape()));
    copies_.emplace(tensors[i].impl(), copies[i]);
  }
  innermost_copies = this;
}

AutocastCopies::~AutocastCopies() { innermost_copies = enclosing_; }

const Tensor* AutocastCopies::find(const Tensor& t, DType dtype) {
  if (!innermost_copies) return nullptr;
  auto it = innermost_copies->copies_.find(t.impl());
  return it != innermost_copies->copies_.end() && it->second.dtype() == dtype ? &it->second : nullptr;
}

}  // namespace weft
