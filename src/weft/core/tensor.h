// Tensor: a strided view of a Storage, with the metadata autograd needs.
//
// A Tensor is a cheap handle (shared_ptr<TensorImpl>); copying it aliases the same tensor.
// Element (i0, i1, ...) lives at storage bytes + dtype_size * (offset + sum_k ik * strides[k]).
// Views (view, reshape when possible, transpose, permute, narrow, slice, select, expand,
// squeeze, unsqueeze) share the storage and only change shape / strides / offset.
//
// Methods that autograd must see (views, contiguous, to, clone) are declared here and defined in
// the ops layer, which records them on the tape; core itself only offers the raw strided
// primitive (as_strided) and the non-differentiable copy.
//
// The one loop in the layer order, kept on purpose. The "Differentiable methods" below are
// defined in src/weft/ops/ and the "Autograd" ones in src/weft/autograd/, both above core, as
// PyTorch's TensorBody.h declares methods that ATen and autograd define. Free functions
// (weft::view(x, shape)) would break the loop, but x.view(...).transpose(1, 2) reads as the
// math does and as every PyTorch user expects, across hundreds of call sites. It compiles because
// tensor.h includes nothing above core (only declarations), and links because weft is one
// static library. Invariant: neither core nor the kernels call these methods (they use
// as_strided, copy_, contiguous_untracked and TensorImpl's fields), so everything below autograd
// works without ops or autograd; tests/test_layers.cpp checks it, with the include order.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "weft/core/device.h"
#include "weft/core/dtype.h"
#include "weft/core/error.h"
#include "weft/core/hooks.h"
#include "weft/core/shape.h"
#include "weft/core/storage.h"

namespace weft {

namespace autograd { class Node; }
struct TensorImpl;
class Generator;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. `empty` leaves the bytes uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor empty_fortran(const Shape& shape, DType dtype = DType::f32);  // column-major
  // Same shape and memory order as `like` when it is a dense permutation (a transposed
  // tensor, say), so elementwise results keep their inputs' layout; row-major otherwise.
  static Tensor empty_like(const Tensor& like, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32);  // 0-d
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype);
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32);
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32);  // U[0, 1)
  static Tensor randn(const Shape& shape, DType dtype = DType::f32);  // the default generator
  static Tensor rand(const Shape& shape, DType dtype = DType::f32);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return numel() * element_size(); }
  const Storage& storage() const;
  void* data_ptr() const;  // address of element (0, ..., 0)
  template <typename T> T* data() const;  // checks that T matches dtype()
  bool is_contiguous() const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Raw strided view sharing storage (not recorded by autograd).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // Copies src into this tensor elementwise (broadcasting src, converting dtype); not recorded.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  // contiguous() without autograd, for kernels: *this if already contiguous, else a copy.
  Tensor contiguous_untracked() const;
  Tensor& zero_() { return fill_(0); }

  // Element access, mainly for tests and printing.
  double item() const;  // one-element tensors
  double at(const std::vector<int64_t>& index) const;
  template <typename T> std::vector<T> to_vector() const;  // row-major order, converted to T
  std::string to_string() const;  // PyTorch-like: tensor([[1.0000, 2.0000], ...], dtype=bf16)

  // Differentiable methods (defined in src/weft/ops/).
  Tensor view(const Shape& shape) const;     // must be expressible without a copy
  Tensor reshape(const Shape& shape) const;  // view when possible, else a copy
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;  // returns *this when already contiguous
  Tensor to(DType dtype) const;  // returns *this when already that dtype
  // A copy on `device` (recorded: its gradient goes back to this tensor's device); *this when
  // already there. DeviceError naming the device when no backend is registered for it.
  Tensor to(Device device) const;
  Tensor clone() const;

  // Autograd (defined in src/weft/autograd/).
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;
  const Tensor& grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor detach() const;  // same storage, no history
  // Backpropagates from this tensor; `gradient` defaults to 1 for a one-element tensor.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  // Called with the leaf once its .grad is final for this backward pass (DDP's bucket trigger).
  // The handle removes it (core/hooks.h: safe twice, and after the tensor died).
  RemovableHandle register_grad_ready_hook(std::function<void(const Tensor&)> hook) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  Storage storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;

  // Autograd state. A tensor with grad_fn is a non-leaf output of a recorded op (output number
  // output_nr of that op); a leaf with requires_grad accumulates into `grad` through the one
  // grad_accumulator node all its uses share.
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;
  int output_nr = 0;
  Tensor grad;
  std::weak_ptr<autograd::Node> grad_accumulator;
  HookList<std::function<void(const Tensor&)>> grad_ready_hooks;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// Strides that read `src` as if it had shape `shape` (NumPy broadcasting: stride 0 where expanded).
Shape broadcast_strides(const Tensor& src, const Shape& shape);

inline const Shape& Tensor::shape() const { return impl_->shape; }
inline const Shape& Tensor::strides() const { return impl_->strides; }
inline int64_t Tensor::dim() const { return static_cast<int64_t>(impl_->shape.size()); }
inline int64_t Tensor::numel() const { return weft::numel(impl_->shape); }
inline int64_t Tensor::storage_offset() const { return impl_->offset; }
inline DType Tensor::dtype() const { return impl_->dtype; }
inline Device Tensor::device() const { return impl_->storage.device(); }
inline const Storage& Tensor::storage() const { return impl_->storage; }
inline void* Tensor::data_ptr() const {
  return static_cast<char*>(impl_->storage.data()) + impl_->offset * dtype_size(impl_->dtype);
}
template <typename T>
T* Tensor::data() const {
  WEFT_CHECK(dtype_of<T>() == dtype(), DTypeError, "data<", dtype_name(dtype_of<T>()),
             ">() called on a ", dtype_name(dtype()), " tensor");
  WEFT_CHECK(device().is_cpu(), DeviceError, "data<", dtype_name(dtype_of<T>()), ">() reads host memory, but the tensor is on ",
             device().name(), " (move it with .to(Device::cpu()) first)");
  return static_cast<T*>(data_ptr());
}
template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  WEFT_CHECK(static_cast<int64_t>(values.size()) == weft::numel(shape), ShapeError,
             "from_vector: ", values.size(), " values cannot fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}
template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = Tensor::empty(shape(), dtype_of<T>());
  c.copy_(*this);
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace weft
