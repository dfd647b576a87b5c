#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "weft/core/convert.h"
#include "weft/core/threads.h"

namespace weft::cpu {

namespace {

std::vector<int64_t> normalise_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  WEFT_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), IndexError, op,
             ": dim listed twice in ", shape_str(dims));
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// x viewed with kept dims first and reduced dims last, as [kept..., reduced...].
Tensor kept_then_reduced(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape shape, strides;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < x.dim(); ++d)
      if (std::binary_search(dims.begin(), dims.end(), d) == (pass == 1)) {
        shape.push_back(x.shape()[d]);
        strides.push_back(x.strides()[d]);
      }
  return x.as_strided(shape, strides, x.storage_offset());
}

// Long sums are blocked: kBlock elements at a time in the accumulator type (f32 vector lanes
// for f32 and the 16-bit types), each block's sum folded into an f64 total. A single f32
// accumulator over a million elements drifts by ~1% (summing 0.1f a million times gives 100958);
// blocking bounds the f32 part's error by the block length instead of the row length.
constexpr int64_t kBlock = 256;

// sum_r row[r] for r in [begin, end)
template <typename T>
double sum_range(const T* row, int64_t begin, int64_t end) {
  using A = acc_type<T>;
  double total = 0;
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    A acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t r = b; r < e; ++r) acc += static_cast<A>(row[r]);
    total += static_cast<double>(acc);
  }
  return total;
}

// out[k] = sum_r in[k * R + r]
template <typename T>
void sum_rows(const T* in, T* out, int64_t K, int64_t R) {
  if (K >= get_num_threads() || K * R < kParallelGrain) {
#pragma omp parallel for if (K * R >= kParallelGrain)
    for (int64_t k = 0; k < K; ++k) out[k] = convert<T>(sum_range(in + k * R, 0, R));
    return;
  }
  // Few long rows: split each row across threads, then add the partial sums in thread order.
  for (int64_t k = 0; k < K; ++k) {
    const T* row = in + k * R;
    std::vector<double> partial(get_num_threads(), 0.0);
#pragma omp parallel
    {
      int threads = omp_get_num_threads(), id = omp_get_thread_num();
      int64_t chunk = (R + threads - 1) / threads;
      int64_t begin = std::min<int64_t>(R, id * chunk), end = std::min<int64_t>(R, begin + chunk);
      partial[id] = sum_range(row, begin, end);
    }
    double total = 0;
    for (double p : partial) total += p;
    out[k] = convert<T>(total);
  }
}

// out[k] = sum_r in[r * K + k]: reducing leading dims of a contiguous tensor (bias gradients).
// Vectorised across k; blocked over r like sum_range.
template <typename T>
void sum_columns(const T* in, T* out, int64_t R, int64_t K) {
  using A = acc_type<T>;
#pragma omp parallel if (K * R >= kParallelGrain)
  {
    int threads = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t chunk = (K + threads - 1) / threads;
    int64_t begin = std::min<int64_t>(K, id * chunk), end = std::min<int64_t>(K, begin + chunk);
    const int64_t n = end - begin;
    std::vector<A> acc(n);
    std::vector<double> total(n, 0.0);
    for (int64_t b = 0; b < R; b += kBlock) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t r = b; r < std::min(R, b + kBlock); ++r) {
        const T* row = in + r * K + begin;
        for (int64_t k = 0; k < n; ++k) acc[k] += static_cast<A>(row[k]);
      }
      for (int64_t k = 0; k < n; ++k) total[k] += static_cast<double>(acc[k]);
    }
    for (int64_t k = 0; k < n; ++k) out[begin + k] = convert<T>(total[k]);
  }
}

bool leading_dims(const std::vector<int64_t>& dims) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  std::vector<int64_t> dims = normalise_dims(dims_in, x.dim(), "sum");
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), x.dtype());
  int64_t K = out.numel();
  int64_t R = K == 0 ? 0 : x.numel() / K;
  if (K == 0) return out;
  visit_floating(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    // K == 1 (a full reduction) is one long row: sum_rows splits it across threads, while the
    // column path would hand the whole of it to one thread.
    if (x.is_contiguous() && leading_dims(dims) && R > 1 && K > 1) {
      sum_columns(x.data<T>(), o, R, K);
      return;
    }
    Tensor rows = kept_then_reduced(x, dims).contiguous_untracked();
    sum_rows(rows.data<T>(), o, K, R);
  });
  return out;
}

MaxResult max(const Tensor& x, int64_t dim_in, bool keepdim) {
  int64_t dim = wrap_dim(dim_in, x.dim(), "max");
  WEFT_CHECK(x.dim() == 0 || x.shape()[dim] > 0, ShapeError, "max: cannot reduce an empty dim ",
             dim, " of shape ", shape_str(x.shape()));
  std::vector<int64_t> dims = x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
  Shape shape = reduced_shape(x.shape(), dims, keepdim);
  MaxResult result{Tensor::empty(shape, x.dtype()), Tensor::empty(shape, DType::i64)};
  int64_t K = result.values.numel(), R = K == 0 ? 0 : x.numel() / K;
  visit_floating(x.dtype(), "max", [&](auto tag) {
    using T = decltype(tag);
    Tensor rows = kept_then_reduced(x, dims).contiguous_untracked();
    const T* in = rows.data<T>();
    T* values = result.values.data<T>();
    int64_t* indices = result.indices.data<int64_t>();
#pragma omp parallel for if (K * R >= kParallelGrain)
    for (int64_t k = 0; k < K; ++k) {
      const T* row = in + k * R;
      auto best = static_cast<acc_type<T>>(row[0]);
      int64_t best_index = 0;
      for (int64_t r = 1; r < R; ++r) {
        auto v = static_cast<acc_type<T>>(row[r]);
        if (v > best || (std::isnan(v) && !std::isnan(best))) best = v, best_index = r;
      }
      values[k] = convert<T>(best);
      indices[k] = best_index;
    }
  });
  return result;
}

Tensor argmax(const Tensor& x, int64_t dim) { return max(x, dim, false).indices; }

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  WEFT_CHECK(lead >= 0, ShapeError, "sum_to: cannot reduce ", shape_str(x.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) dims.push_back(d);
    else if (shape[d - lead] == 1 && x.shape()[d] != 1) dims.push_back(d);
    else WEFT_CHECK(shape[d - lead] == x.shape()[d], ShapeError, "sum_to: cannot reduce ",
                    shape_str(x.shape()), " to ", shape_str(shape));
  }
  Tensor reduced = sum(x, dims, true);
  return reduced.as_strided(shape, contiguous_strides(shape), reduced.storage_offset());
}

namespace reference {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  std::vector<int64_t> dims = normalise_dims(dims_in, x.dim(), "sum");
  Shape kept_shape = reduced_shape(x.shape(), dims, true);
  std::vector<double> acc(numel(kept_shape), 0.0);
  Shape kept_strides = contiguous_strides(kept_shape);
  std::vector<int64_t> index(x.dim(), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t r = i, out = 0;
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      index[d] = r % x.shape()[d];
      r /= x.shape()[d];
      if (kept_shape[d] != 1) out += index[d] * kept_strides[d];
    }
    acc[out] += x.at(index);
  }
  return Tensor::from_vector(acc, reduced_shape(x.shape(), dims, keepdim), x.dtype());
}

}  // namespace reference

}  // namespace weft::cpu
