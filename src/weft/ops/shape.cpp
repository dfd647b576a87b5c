#include "weft/ops/shape.h"

#include <numeric>
#include <optional>

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"

namespace weft {

using autograd::record;

// A view of x whose backward is `to_input(grad)`. Views move no bytes and do no arithmetic; their
// scopes show where a model reshapes.
template <typename ToInput>
static Tensor make_view(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset,
                        Op op, ToInput to_input) {
  monitor::OpScope scope(op, {x});
  Tensor out = x.as_strided(shape, strides, offset);
  record(op_name(op), {x}, {out}, [to_input](const std::vector<Tensor>& g) { return std::vector<Tensor>{to_input(g[0])}; });
  return out;
}

// Resolves one -1 and checks the element count.
static Shape infer_shape(const Shape& requested, int64_t count, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      WEFT_CHECK(infer < 0, ShapeError, op, ": only one dimension can be -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      WEFT_CHECK(shape[i] >= 0, ShapeError, op, ": invalid size in ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    WEFT_CHECK(known > 0 && count % known == 0, ShapeError, op, ": shape ", shape_str(requested),
               " is invalid for ", count, " elements");
    shape[infer] = count / known;
  }
  WEFT_CHECK(numel(shape) == count, ShapeError, op, ": shape ", shape_str(requested),
             " is invalid for input of ", count, " elements");
  return shape;
}

// Strides that show x's elements in `shape` without copying, if any exist (PyTorch's rule:
// each group of old dims that is contiguous in memory can be re-split freely).
static std::optional<Shape> view_strides(const Tensor& x, const Shape& shape) {
  const Shape& old_shape = x.shape();
  const Shape& old_strides = x.strides();
  Shape strides(shape.size(), 1);
  if (x.numel() == 0 || old_shape.empty()) return x.numel() == 0 ? contiguous_strides(shape) : strides;
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_shape(requested, numel(), "view");
  std::optional<Shape> strides = view_strides(*this, shape);
  WEFT_CHECK(strides.has_value(), ShapeError, "view: cannot view ", shape_str(this->shape()), " with strides ",
             shape_str(this->strides()), " as ", shape_str(shape),
             " without copying (the tensor is not contiguous); use reshape() or contiguous() first");
  Shape input_shape = this->shape();
  return make_view(*this, shape, *strides, storage_offset(), Op::view,
                   [input_shape](const Tensor& g) { return g.reshape(input_shape); });
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = infer_shape(requested, numel(), "reshape");
  if (view_strides(*this, shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  int64_t a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  Shape shape = this->shape(), strides = this->strides();
  if (dim() > 0) {
    std::swap(shape[a], shape[b]);
    std::swap(strides[a], strides[b]);
  }
  return make_view(*this, shape, strides, storage_offset(), Op::transpose,
                   [a, b](const Tensor& g) { return g.transpose(a, b); });
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  WEFT_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError, "permute: ", dims.size(),
             " dims given for a ", dim(), "-d tensor");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    WEFT_CHECK(inverse[d] < 0, IndexError, "permute: dim ", d, " repeated in ", shape_str(dims));
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
  }
  return make_view(*this, shape, strides, storage_offset(), Op::permute,
                   [inverse](const Tensor& g) { return g.permute(inverse); });
}

// Gradient of a view that picks part of the input: zeros elsewhere. When a gradient for the input
// has already arrived (attention's q, k and v are three slices of one projection), g is added
// into its part of that one in place instead, and none is returned: the same sum, without a
// zero-filled input-sized tensor per slice for the engine to add up.
static Tensor scatter_into_zeros(const Tensor& g, const Shape& input_shape, const Shape& strides_of_view,
                                 int64_t offset_of_view, const Shape& view_shape) {
  if (Tensor* gathered = autograd::gathered_gradient(0); gathered && gathered->dtype() == g.dtype()) {
    Tensor part = gathered->as_strided(view_shape, strides_of_view, gathered->storage_offset() + offset_of_view);
    kernels::of(part).binary_(kernels::Binary::add, part, g);
    return Tensor();
  }
  Tensor full = Tensor::zeros(input_shape, g.dtype());
  full.as_strided(view_shape, strides_of_view, offset_of_view).copy_(g);
  return full;
}

Tensor Tensor::slice(int64_t dim_in, int64_t start, int64_t end, int64_t step) const {
  int64_t d = wrap_dim(dim_in, dim(), "slice");
  int64_t n = shape()[d];
  WEFT_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  int64_t offset = storage_offset() + start * this->strides()[d];
  // The gradient is laid out contiguously in input_shape; the view's place in it, relative:
  Shape input_shape = this->shape();
  Shape grad_strides = contiguous_strides(input_shape);
  int64_t grad_offset = start * grad_strides[d];
  grad_strides[d] *= step;
  return make_view(*this, shape, strides, offset, Op::slice, [=](const Tensor& g) {
    return scatter_into_zeros(g, input_shape, grad_strides, grad_offset, shape);
  });
}

Tensor Tensor::narrow(int64_t dim_in, int64_t start, int64_t length) const {
  int64_t d = wrap_dim(dim_in, dim(), "narrow");
  WEFT_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], IndexError, "narrow: [", start,
             ", ", start + length, ") is out of range for dim ", d, " of size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_in, int64_t index) const {
  int64_t d = wrap_dim(dim_in, dim(), "select");
  int64_t n = shape()[d];
  WEFT_CHECK(index >= -n && index < n, IndexError, "select: index ", index,
             " out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& requested) const {
  WEFT_CHECK(requested.size() >= shape().size(), ShapeError, "expand: cannot expand ",
             shape_str(shape()), " to fewer dims ", shape_str(requested));
  size_t lead = requested.size() - shape().size();
  Shape shape(requested.size()), strides(requested.size(), 0);
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      WEFT_CHECK(requested[i] >= 0, ShapeError, "expand: invalid size in ", shape_str(requested));
      shape[i] = requested[i];
      continue;
    }
    int64_t have = this->shape()[i - lead];
    int64_t want = requested[i] == -1 ? have : requested[i];
    WEFT_CHECK(have == want || have == 1, ShapeError, "expand: dim ", i, " of ", shape_str(this->shape()),
               " has size ", have, " and cannot expand to ", want, " (only size-1 dims expand)");
    shape[i] = want;
    strides[i] = have == want ? this->strides()[i - lead] : 0;
  }
  Shape input_shape = this->shape();
  return make_view(*this, shape, strides, storage_offset(), Op::expand,
                   [input_shape](const Tensor& g) { return kernels::of(g).sum_to(g, input_shape); });
}

Tensor Tensor::squeeze(int64_t dim_in) const {
  int64_t d = wrap_dim(dim_in, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return *this;
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Shape input_shape = this->shape();
  return make_view(*this, shape, strides, storage_offset(), Op::squeeze,
                   [input_shape](const Tensor& g) { return g.reshape(input_shape); });
}

Tensor Tensor::unsqueeze(int64_t dim_in) const {
  int64_t d = wrap_dim(dim_in, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), strides = this->strides();
  int64_t stride = d < dim() ? this->strides()[d] * this->shape()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  Shape input_shape = this->shape();
  return make_view(*this, shape, strides, storage_offset(), Op::unsqueeze,
                   [input_shape](const Tensor& g) { return g.reshape(input_shape); });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  WEFT_CHECK(s <= e, IndexError, "flatten: start_dim ", s, " after end_dim ", e);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  monitor::OpScope scope(Op::clone, {*this});
  Tensor out = Tensor::empty(shape(), dtype()).copy_(*this);
  if (scope.active()) scope.set_cost_per_element(out, {*this, out});
  record(op_name(Op::clone), {*this}, {out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  monitor::OpScope scope(Op::to, {*this});
  Tensor out = Tensor::empty(shape(), target).copy_(*this);
  if (scope.active()) scope.set_cost_per_element(out, {*this, out});
  DType source = dtype();
  if (is_floating(target) && is_floating(source))
    record(op_name(Op::to), {*this}, {out}, [source](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(source)}; });
  return out;
}

// The copy runs on the table of whichever side is not the CPU, as a GPU backend's copy kernel
// moves bytes between the host and its device.
Tensor Tensor::to(Device target) const {
  const Device source = device();
  if (target == source) return *this;
  const kernels::KernelTable& k = kernels::of(target.is_cpu() ? source : target);
  monitor::OpScope scope(Op::to, {*this});
  Tensor out = Tensor::empty(shape(), dtype(), target);
  k.copy(out, *this);
  if (scope.active()) scope.set_cost_per_element(out, {*this, out});
  record(op_name(Op::to), {*this}, {out},
         [source](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(source)}; });
  return out;
}

static void check_joinable(const std::vector<Tensor>& tensors, int64_t dim, const char* op) {
  WEFT_CHECK(!tensors.empty(), ValueError, op, ": expected at least one tensor");
  const Tensor& first = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    WEFT_CHECK(t.dtype() == first.dtype(), DTypeError, op, ": tensor ", i, " is ",
               dtype_name(t.dtype()), " but tensor 0 is ", dtype_name(first.dtype()));
    bool same = t.dim() == first.dim();
    for (int64_t d = 0; same && d < t.dim(); ++d) same = d == dim || t.shape()[d] == first.shape()[d];
    WEFT_CHECK(same, ShapeError, op, ": tensor ", i, " has shape ", shape_str(t.shape()),
               ", incompatible with tensor 0's ", shape_str(first.shape()), " along dims other than ", dim);
  }
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  WEFT_CHECK(!tensors.empty(), ValueError, "cat: expected at least one tensor");
  int64_t dim = wrap_dim(dim_in, tensors[0].dim(), "cat");
  check_joinable(tensors, dim, "cat");
  Shape shape = tensors[0].shape();
  std::vector<int64_t> sizes;
  shape[dim] = 0;
  for (const Tensor& t : tensors) {
    sizes.push_back(t.shape()[dim]);
    shape[dim] += t.shape()[dim];
  }
  monitor::OpScope scope(Op::cat, tensors);
  Tensor out = Tensor::empty(shape, tensors[0].dtype());
  if (scope.active()) scope.set_cost_per_element(out, {out, out});
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    out.as_strided(t.shape(), out.strides(), start * out.strides()[dim]).copy_(t);
    start += t.shape()[dim];
  }
  record(op_name(Op::cat), tensors, {out}, [sizes, dim](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    int64_t offset = 0;
    for (int64_t size : sizes) {
      grads.push_back(g[0].narrow(dim, offset, size));
      offset += size;
    }
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim_in) {
  WEFT_CHECK(!tensors.empty(), ValueError, "stack: expected at least one tensor");
  int64_t dim = wrap_dim(dim_in, tensors[0].dim() + 1, "stack");
  for (size_t i = 1; i < tensors.size(); ++i)
    WEFT_CHECK(tensors[i].shape() == tensors[0].shape(), ShapeError, "stack: tensor ", i, " has shape ",
               shape_str(tensors[i].shape()), " but tensor 0 has ", shape_str(tensors[0].shape()));
  std::vector<Tensor> unsqueezed;
  for (const Tensor& t : tensors) unsqueezed.push_back(t.unsqueeze(dim));
  return cat(unsqueezed, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  WEFT_CHECK(total == x.shape()[dim], ShapeError, "split: sizes ", shape_str(sizes), " add up to ", total,
             " but dim ", dim, " of ", shape_str(x.shape()), " has ", x.shape()[dim]);
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(x.narrow(dim, start, size));
    start += size;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t piece, int64_t dim_in) {
  int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  WEFT_CHECK(piece > 0, ValueError, "split: piece size must be positive, got ", piece);
  std::vector<int64_t> sizes;
  for (int64_t left = x.shape()[dim]; left > 0; left -= piece) sizes.push_back(std::min(piece, left));
  return split(x, sizes, dim);
}

}  // namespace weft
