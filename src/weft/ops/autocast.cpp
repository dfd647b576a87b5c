#include "weft/ops/autocast.h"

#include <utility>

namespace weft {

namespace {

// The dtype `op` wants t in, or nullopt when t goes in as it is.
std::optional<DType> target_dtype(Op op, const Tensor& t) {
  const std::optional<DType> current = autocast_dtype();
  if (!current) return std::nullopt;
  const AutocastPolicy policy = op_info(op).autocast;
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::f64 || policy == AutocastPolicy::keep ||
      policy == AutocastPolicy::f32_inside)
    return std::nullopt;
  return policy == AutocastPolicy::lower ? *current : DType::f32;
}

}  // namespace

Tensor autocast(Op op, const Tensor& t) {
  const std::optional<DType> target = target_dtype(op, t);
  return target ? t.to(*target) : t;
}

Tensor autocast_operand(Op op, const Tensor& t) {
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
