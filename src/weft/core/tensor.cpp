#include "weft/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <type_traits>

#include "weft/core/convert.h"
#include "weft/core/random.h"
#include "weft/core/strided.h"
#include "weft/core/transpose.h"

namespace weft {

static Tensor make_tensor(Storage storage, const Shape& shape, const Shape& strides, int64_t offset,
                          DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

static void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape)
    WEFT_CHECK(s >= 0, ShapeError, op, ": negative size in shape ", shape_str(shape));
}

// Sizes multiplied from flags or file headers can overflow before they reach the allocator, which
// would then be asked for the wrapped-around remainder: the product is checked here.
static Storage allocate_for(const Shape& shape, DType dtype, Device device) {
  size_t nbytes = dtype_size(dtype);
  bool overflow = false;
  for (int64_t s : shape) overflow |= __builtin_mul_overflow(nbytes, static_cast<size_t>(s), &nbytes);
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  if (empty) nbytes = 0;
  WEFT_CHECK(!overflow || empty, OutOfMemoryError, "out of memory: a tensor ", shape_str(shape), " ",
             dtype_name(dtype), " would take more than 2^64 bytes");
  return Storage::allocate(nbytes, device,
                           [&shape, dtype] { return str("tensor ", shape_str(shape), " ", dtype_name(dtype)); });
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "empty");
  Storage storage = allocate_for(shape, dtype, device);  // first: it refuses sizes whose strides would overflow
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::empty_fortran(const Shape& shape, DType dtype) {
  check_shape(shape, "empty_fortran");
  Storage storage = allocate_for(shape, dtype, Device::cpu());  // first, as in empty
  return make_tensor(std::move(storage), shape, fortran_strides(shape), 0, dtype);
}

Tensor Tensor::empty_like(const Tensor& like, DType dtype) {
  // The common case first: a contiguous input needs no stride order (the sort allocates).
  if (like.is_contiguous()) return empty(like.shape(), dtype, like.device());
  std::vector<int64_t> order(like.dim());
  for (int64_t d = 0; d < like.dim(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return like.strides()[x] > like.strides()[y]; });
  Shape strides(like.dim());
  int64_t expected = 1;
  bool dense = true;
  for (int64_t i = like.dim() - 1; i >= 0; --i) {
    int64_t d = order[i];
    dense = dense && (like.shape()[d] == 1 || like.strides()[d] == expected);
    strides[d] = expected;
    expected *= like.shape()[d];
  }
  if (!dense) return empty(like.shape(), dtype, like.device());
  return make_tensor(allocate_for(like.shape(), dtype, like.device()), like.shape(), strides, 0, dtype);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) { return empty(shape, dtype).fill_(value); }
Tensor Tensor::zeros(const Shape& shape, DType dtype) { return full(shape, 0, dtype); }
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1, dtype); }
Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>(i);
  return from_vector(values, {n}, dtype);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return empty(shape, dtype).copy_(from_vector<double>(values, shape));
}

template <typename Draw>
static Tensor fill_random(const Shape& shape, DType dtype, Draw draw) {
  Tensor values = Tensor::empty(shape, DType::f64);
  double* p = values.data<double>();
  for (int64_t i = 0; i < values.numel(); ++i) p[i] = draw();
  return dtype == DType::f64 ? values : Tensor::empty(shape, dtype).copy_(values);
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype) {
  return fill_random(shape, dtype, [&] { return gen.normal(); });
}
Tensor Tensor::rand(const Shape& shape, Generator& gen, DType dtype) {
  return fill_random(shape, dtype, [&] { return gen.uniform(); });
}
Tensor Tensor::randn(const Shape& shape, DType dtype) { return randn(shape, default_generator(), dtype); }
Tensor Tensor::rand(const Shape& shape, DType dtype) { return rand(shape, default_generator(), dtype); }

int64_t Tensor::size(int64_t dim) const { return impl_->shape[wrap_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return impl_->strides[wrap_dim(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (impl_->shape[d] == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->shape[d];
  }
  return true;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  WEFT_CHECK(shape.size() == strides.size(), ShapeError, "as_strided: shape ", shape_str(shape),
             " and strides ", shape_str(strides), " differ in rank");
  check_shape(shape, "as_strided");
  if (weft::numel(shape) > 0) {
    int64_t lo = offset, hi = offset;
    for (size_t d = 0; d < shape.size(); ++d) {
      WEFT_CHECK(strides[d] >= 0, ShapeError, "as_strided: negative stride in ", shape_str(strides));
      hi += (shape[d] - 1) * strides[d];
    }
    int64_t capacity = static_cast<int64_t>(storage().nbytes() / element_size());
    WEFT_CHECK(lo >= 0 && hi < capacity, IndexError, "as_strided: view ", shape_str(shape),
               " strides ", shape_str(strides), " offset ", offset, " reaches element ", hi,
               " of a storage holding ", capacity);
  }
  return make_tensor(storage(), shape, strides, offset, dtype());
}

Shape broadcast_strides(const Tensor& src, const Shape& shape) {
  Shape strides(shape.size(), 0);
  size_t lead = shape.size() - src.shape().size();
  for (size_t d = 0; d < src.shape().size(); ++d)
    strides[lead + d] = src.shape()[d] == 1 ? 0 : src.strides()[d];
  return strides;
}

// dst[i][j] = convert(src[j][i]) in cache-sized tiles, for a transpose that also converts: a plain
// row loop would touch one cache line of src per element.
template <typename D, typename S>
static void convert_transposed(D* dst, const S* src, const StridedLayout<2>& layout) {
  constexpr int64_t tile = 32;
  const int64_t rows = layout.shape[0], cols = layout.shape[1];
  const int64_t dst_row = layout.strides[0][0], src_col = layout.strides[1][1];
  const int64_t tiles_across = (cols + tile - 1) / tile;
  parallel_for((rows + tile - 1) / tile * tiles_across, rows * cols >= kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = t / tiles_across * tile, j0 = t % tiles_across * tile;
      for (int64_t i = i0; i < std::min(i0 + tile, rows); ++i)
        for (int64_t j = j0; j < std::min(j0 + tile, cols); ++j) dst[i * dst_row + j] = convert<D>(src[i + j * src_col]);
    }
  });
}

// The layout as matrices whose last two dims are transposed between dst (operand 0, rows
// contiguous) and src (operand 1, columns contiguous), when it is one; the dims before them
// enumerate the matrices.
static std::optional<TransposedMatrices> as_transposed_matrices(const StridedLayout<2>& layout) {
  const size_t n = layout.shape.size();
  if (n < 2) return std::nullopt;
  const Shape &dst = layout.strides[0], &src = layout.strides[1];
  if (dst[n - 1] != 1 || src[n - 2] != 1 || src[n - 1] == 1) return std::nullopt;
  TransposedMatrices m{.rows = layout.shape[n - 2], .cols = layout.shape[n - 1], .dst_row_stride = dst[n - 2],
                       .src_row_stride = src[n - 1], .dst_offsets = {0}, .src_offsets = {0}};
  for (size_t d = n - 2; d-- > 0;) {  // outer dims, innermost first: offsets in row-major order
    std::vector<int64_t> dst_offsets, src_offsets;
    for (int64_t k = 0; k < layout.shape[d]; ++k)
      for (size_t b = 0; b < m.dst_offsets.size(); ++b) {
        dst_offsets.push_back(k * dst[d] + m.dst_offsets[b]);
        src_offsets.push_back(k * src[d] + m.src_offsets[b]);
      }
    m.dst_offsets = std::move(dst_offsets);
    m.src_offsets = std::move(src_offsets);
  }
  return m;
}

// core's loops read and write host memory; a device's tensors go through its kernels
// (Tensor::to, kernels/kernel_table.h).
static void check_on_host(const Tensor& t, const char* what) {
  WEFT_CHECK(t.device().is_cpu(), DeviceError, what, ": the tensor is on ", t.device().name(),
             ", and this reads host memory (move it with .to(Device::cpu()) first)");
}

Tensor& Tensor::copy_(const Tensor& src) {
  WEFT_CHECK(defined() && src.defined(), ValueError, "copy_: undefined tensor");
  check_on_host(*this, "copy_");
  check_on_host(src, "copy_");
  Shape target = broadcast_shapes(shape(), src.shape(), "copy_");
  WEFT_CHECK(target == shape(), ShapeError, "copy_: cannot copy ", shape_str(src.shape()),
             " into ", shape_str(shape()));
  std::array<Shape, 2> strides{impl_->strides, broadcast_strides(src, shape())};
  visit_dtype(dtype(), [&](auto dst_tag) {
    using D = decltype(dst_tag);
    visit_dtype(src.dtype(), [&](auto src_tag) {
      using S = decltype(src_tag);
      D* dst = static_cast<D*>(data_ptr());
      const S* in = static_cast<const S*>(src.data_ptr());
      StridedLayout<2> layout = coalesce<2>(shape(), strides);
      if constexpr (std::is_same_v<D, S>) {
        if (std::optional<TransposedMatrices> m = as_transposed_matrices(layout)) {
          copy_transposed(dst, in, sizeof(D), *m);
          return;
        }
      }
      if (layout.shape.size() == 2 && layout.strides[0][1] == 1 && layout.strides[1][0] == 1 &&
          layout.strides[1][1] != 1) {
        convert_transposed(dst, in, layout);
        return;
      }
      for_each_row<2>(shape(), strides, [&](auto off, int64_t n, auto inner) {
        D* d = dst + off[0];
        const S* s = in + off[1];
        if (inner[0] == 1 && inner[1] == 1) {
          for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) d[i * inner[0]] = convert<D>(s[i * inner[1]]);
        }
      });
    });
  });
  return *this;
}

Tensor Tensor::contiguous_untracked() const {
  return is_contiguous() ? *this : Tensor::empty(shape(), dtype()).copy_(*this);
}

Tensor& Tensor::fill_(double value) {
  check_on_host(*this, "fill_");
  visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T>(value);
    T* dst = static_cast<T*>(data_ptr());
    for_each_row<1>(shape(), {impl_->strides}, [&](auto off, int64_t n, auto inner) {
      for (int64_t i = 0; i < n; ++i) dst[off[0] + i * inner[0]] = v;
    });
  });
  return *this;
}

double Tensor::at(const std::vector<int64_t>& index) const {
  check_on_host(*this, "at");
  WEFT_CHECK(static_cast<int64_t>(index.size()) == dim(), IndexError, "at: ", index.size(),
             " indices for a ", dim(), "-d tensor of shape ", shape_str(shape()));
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    WEFT_CHECK(index[d] >= 0 && index[d] < impl_->shape[d], IndexError, "at: index ", index[d],
               " out of range for dim ", d, " of size ", impl_->shape[d]);
    offset += index[d] * impl_->strides[d];
  }
  return visit_dtype(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return convert<double>(static_cast<const T*>(data_ptr())[offset]);
  });
}

double Tensor::item() const {
  WEFT_CHECK(numel() == 1, ValueError, "item: expected a one-element tensor, got shape ",
             shape_str(shape()));
  return at(std::vector<int64_t>(dim(), 0));
}

// Printing follows PyTorch: nested brackets, 4 decimals for floats (scientific when the range
// calls for it), long dims summarised as "first 3, ..., last 3".
static void print_values(std::ostream& out, const Tensor& t, std::vector<int64_t>& index, int64_t d,
                         bool floating, bool scientific, int indent) {
  constexpr int64_t edge = 3, summarise_above = 1000;
  bool summarise = t.numel() > summarise_above;
  auto element = [&] {
    double v = t.at(index);
    char buf[64];
    if (!floating) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    else if (std::isnan(v) || std::isinf(v)) std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
    else std::snprintf(buf, sizeof buf, scientific ? "%.4e" : "%.4f", v);
    out << buf;
  };
  if (t.dim() == 0) return element();
  out << "[";
  int64_t n = t.shape()[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * edge && i == edge) {
      out << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - edge;
    }
    index[d] = i;
    if (d + 1 == t.dim()) element();
    else print_values(out, t, index, d + 1, floating, scientific, indent + 1);
    if (i + 1 < n) out << (d + 1 == t.dim() ? ", " : ",\n" + std::string(t.dim() - d - 2, '\n') + std::string(indent + 1, ' '));
  }
  out << "]";
}

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream out;
  out << "tensor(";
  bool floating = is_floating(dtype());
  double max_abs = 0, min_abs = INFINITY;
  if (floating && numel() <= 100000)
    for (double v : to_vector<double>())
      if (std::isfinite(v) && v != 0) max_abs = std::max(max_abs, std::abs(v)), min_abs = std::min(min_abs, std::abs(v));
  bool scientific = max_abs >= 1e8 || (max_abs > 0 && (min_abs < 1e-4 || max_abs / min_abs > 1e3));
  std::vector<int64_t> index(dim(), 0);
  if (numel() == 0) out << "[]";
  else print_values(out, *this, index, 0, floating, scientific, 7);
  if (numel() == 0 && dim() != 1) out << ", size=" << shape_str(shape());
  if (dtype() != DType::f32) out << ", dtype=" << dtype_name(dtype());
  if (impl_->requires_grad) out << ", requires_grad=True";
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.to_string(); }

}  // namespace weft
