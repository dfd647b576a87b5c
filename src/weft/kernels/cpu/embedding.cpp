#include "weft/kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"

namespace weft::cpu {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  Tensor idx = indices.contiguous_untracked();
  const int64_t* pi = idx.data<int64_t>();
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i)
    WEFT_CHECK(pi[i] >= 0 && pi[i] < V, IndexError, "embedding: index ", pi[i], " at flat position ", i,
               " is out of range for ", V, " rows (weight ", shape_str(weight.shape()), ", expected 0..", V - 1,
               ")");
  Shape shape = indices.shape();
  shape.push_back(D);
  Tensor out = Tensor::empty(shape, weight.dtype());
  Tensor wc = weight.contiguous_untracked();
  const char* src = static_cast<const char*>(wc.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const size_t row_bytes = static_cast<size_t>(D) * weight.element_size();
#pragma omp parallel for if (n * D >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * row_bytes, src + pi[i] * row_bytes, row_bytes);
  return out;
}

// Columns per backward task: tasks own disjoint columns of the gradient, so threads never
// write the same element and every element adds its rows in index order.
constexpr int64_t kColumnBlock = 64;

// grad_weight[idx[i], :] += grad_out[i, :] for every i, in i's order (deterministic).
Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t V, int64_t D) {
  Tensor gc = grad_out.contiguous_untracked();
  Tensor grad = Tensor::zeros({V, D}, grad_out.dtype());
  const int64_t* idx = indices.data<int64_t>();
  const int64_t n = indices.numel();
  visit_dtype(grad.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_half_like<T> || std::is_floating_point_v<T>) {
      // 16-bit gradients accumulate in f32 and round once; repeated tokens would lose bits otherwise.
      using C = compute_type<T>;
      Tensor acc = std::is_same_v<T, C> ? grad : Tensor::zeros({V, D}, dtype_of<C>());
      C* dst = acc.data<C>();
      const T* src = gc.data<T>();
      const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (n * D >= kParallelGrain)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t c0 = b * kColumnBlock, c1 = std::min(D, c0 + kColumnBlock);
        for (int64_t i = 0; i < n; ++i) {
          C* row = dst + idx[i] * D;
          const T* g = src + i * D;
          for (int64_t j = c0; j < c1; ++j) row[j] += static_cast<C>(g[j]);
        }
      }
      if (!acc.is_same(grad)) grad.copy_(acc);
    } else {
      throw DTypeError(str("embedding backward: gradients need a floating-point weight, got ",
                           dtype_name(grad.dtype())));
    }
  });
  return grad;
}

// The same rows added into `gathered`, a gradient of the weight that already arrived (a tied
// output projection's): each row's contributions are summed in i's order first and added once, so
// the result is bit for bit what summing the dense gradient above into `gathered` gives, without
// writing V x D zeros and reading them back.
template <typename T>
static void add_rows_into(Tensor& gathered, const Tensor& grad_out, const Tensor& indices) {
  Tensor gc = grad_out.contiguous_untracked();
  const int64_t* idx = indices.data<int64_t>();
  const int64_t n = indices.numel(), D = gathered.shape()[1];
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [idx](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  T* dst = gathered.data<T>();
  const T* src = gc.data<T>();
  const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (n * D >= kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, c1 = std::min(D, c0 + kColumnBlock);
    T sum[kColumnBlock];
    for (int64_t k = 0; k < n;) {
      const int64_t row = idx[order[k]];
      std::fill(sum, sum + (c1 - c0), T(0));
      for (; k < n && idx[order[k]] == row; ++k) {
        const T* g = src + order[k] * D;
        for (int64_t j = c0; j < c1; ++j) sum[j - c0] += g[j];
      }
      T* out = dst + row * D;
      for (int64_t j = c0; j < c1; ++j) out[j] += sum[j - c0];
    }
  }
}

bool embedding_backward_into(Tensor& gathered, const Tensor& grad_out, const Tensor& indices) {
  if (gathered.dtype() != grad_out.dtype()) return false;
  if (grad_out.dtype() == DType::f32) add_rows_into<float>(gathered, grad_out, indices);
  else if (grad_out.dtype() == DType::f64) add_rows_into<double>(gathered, grad_out, indices);
  else return false;
  return true;
}

}  // namespace weft::cpu
