#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/fast_math.h"
#include "weft/kernels/cpu/widen.h"

namespace weft::cpu {

namespace {

// x read as [outer, n, inner] around the reduced dim.
struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
};

Lanes lanes_along(const Shape& shape, int64_t dim) {
  Lanes l;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) l.outer *= shape[d];
    else if (d == dim) l.n = shape[d];
    else l.inner *= shape[d];
  }
  return l;
}

// Columns handled together when inner > 1: enough for unit-stride inner loops, few enough that
// the per-column max / sum live in a stack array.
constexpr int64_t kBlock = 64;

// Calls row(o) for each outer row when inner == 1, else block(o, c0, w) for each block of w
// columns starting at column c0.
template <typename RowFn, typename BlockFn>
void for_each_lane(const Lanes& l, RowFn&& row, BlockFn&& block) {
  const int64_t work = l.outer * l.n * l.inner;
  if (l.inner == 1) {
#pragma omp parallel for if (work >= kParallelGrain)
    for (int64_t o = 0; o < l.outer; ++o) row(o);
    return;
  }
  const int64_t blocks = (l.inner + kBlock - 1) / kBlock;
#pragma omp parallel for if (work >= kParallelGrain)
  for (int64_t task = 0; task < l.outer * blocks; ++task) {
    int64_t o = task / blocks, c0 = (task % blocks) * kBlock;
    block(o, c0, std::min(kBlock, l.inner - c0));
  }
}

// ---- forward ----

// The max and the sum of exp(x - m) of a contiguous row, in 16 partial results: GCC vectorises
// those loops but not a single running max or sum, whose order it may not change. The partial
// results combine in a fixed order, so the result does not depend on threads. The inner loops
// say `omp simd`: GCC otherwise unrolls them completely first, and with straight-line (SLP)
// vectorisation off (CMakeLists.txt) the max ran scalar. bf16 rows are widened 16 at a time
// (widen.h).
constexpr int64_t kLanes = 16;
static_assert(kLanes == kWidenLanes);

template <typename A, typename T>
A row_max(const T* x, int64_t n) {
  A part[kLanes];
  std::fill_n(part, kLanes, -std::numeric_limits<A>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      float w[kLanes];
      widen16(x + i, w);
#pragma omp simd simdlen(kLanes)
      for (int64_t j = 0; j < kLanes; ++j) part[j] = std::max(part[j], w[j]);
    } else {
#pragma omp simd simdlen(kLanes)
      for (int64_t j = 0; j < kLanes; ++j) part[j] = std::max(part[j], static_cast<A>(x[i + j]));
    }
  }
  for (; i < n; ++i) part[0] = std::max(part[0], static_cast<A>(x[i]));
  return *std::max_element(part, part + kLanes);
}

template <typename A, typename T>
A row_sum_exp(const T* x, int64_t n, A m) {
  A part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      float w[kLanes];
      widen16(x + i, w);
#pragma omp simd simdlen(kLanes)
      for (int64_t j = 0; j < kLanes; ++j) part[j] += fast_exp(w[j] - m);
    } else {
#pragma omp simd simdlen(kLanes)
      for (int64_t j = 0; j < kLanes; ++j) part[j] += fast_exp(static_cast<A>(x[i + j]) - m);
    }
  }
  for (; i < n; ++i) part[0] += fast_exp(static_cast<A>(x[i]) - m);
  A s = 0;
  for (A p : part) s += p;
  return s;
}

template <typename T, bool Log>
void softmax_row(const T* x, T* y, int64_t n) {
  using A = acc_type<T>;
  const A m = row_max<A>(x, n);
  const A s = row_sum_exp<A>(x, n, m);
  if constexpr (Log) {
    const A shift = m + std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = convert<T>(static_cast<A>(x[i]) - shift);
  } else {
    const A r = A(1) / s;
    for (int64_t i = 0; i < n; ++i) y[i] = convert<T>(fast_exp(static_cast<A>(x[i]) - m) * r);
  }
}

// w columns of a [n, inner] slab, column j at x[i * inner + j].
template <typename T, bool Log>
void softmax_block(const T* x, T* y, int64_t n, int64_t inner, int64_t w) {
  using A = acc_type<T>;
  A m[kBlock], s[kBlock];
  std::fill_n(m, w, -std::numeric_limits<A>::infinity());
  std::fill_n(s, w, A(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) m[j] = std::max(m[j], static_cast<A>(x[i * inner + j]));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) s[j] += fast_exp(static_cast<A>(x[i * inner + j]) - m[j]);
  if constexpr (Log) {
    for (int64_t j = 0; j < w; ++j) m[j] += std::log(s[j]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j) y[i * inner + j] = convert<T>(static_cast<A>(x[i * inner + j]) - m[j]);
  } else {
    for (int64_t j = 0; j < w; ++j) s[j] = A(1) / s[j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j)
        y[i * inner + j] = convert<T>(fast_exp(static_cast<A>(x[i * inner + j]) - m[j]) * s[j]);
  }
}

template <bool Log>
Tensor softmax_forward(const Tensor& x, int64_t dim, const char* op) {
  WEFT_CHECK(x.defined(), ValueError, op, ": undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor xc = x.contiguous_untracked();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const Lanes l = lanes_along(x.shape(), d);
  visit_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (y.numel() == 0) return;
    const T* px = xc.data<T>();
    T* py = y.data<T>();
    for_each_lane(
        l, [&](int64_t o) { softmax_row<T, Log>(px + o * l.n, py + o * l.n, l.n); },
        [&](int64_t o, int64_t c0, int64_t w) {
          int64_t base = o * l.n * l.inner + c0;
          softmax_block<T, Log>(px + base, py + base, l.n, l.inner, w);
        });
  });
  return y;
}

// ---- backward ----

template <typename T, bool Log>
void softmax_backward_row(const T* g, const T* y, T* dx, int64_t n) {
  using A = acc_type<T>;
  A s = 0;
  if constexpr (Log) {
    for (int64_t i = 0; i < n; ++i) s += static_cast<A>(g[i]);
    for (int64_t i = 0; i < n; ++i)
      dx[i] = convert<T>(static_cast<A>(g[i]) - fast_exp(static_cast<A>(y[i])) * s);
  } else {
    for (int64_t i = 0; i < n; ++i) s += static_cast<A>(g[i]) * static_cast<A>(y[i]);
    for (int64_t i = 0; i < n; ++i)
      dx[i] = convert<T>(static_cast<A>(y[i]) * (static_cast<A>(g[i]) - s));
  }
}

template <typename T, bool Log>
void softmax_backward_block(const T* g, const T* y, T* dx, int64_t n, int64_t inner, int64_t w) {
  using A = acc_type<T>;
  A s[kBlock];
  std::fill_n(s, w, A(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t k = i * inner + j;
      s[j] += Log ? static_cast<A>(g[k]) : static_cast<A>(g[k]) * static_cast<A>(y[k]);
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t k = i * inner + j;
      const A gk = static_cast<A>(g[k]), yk = static_cast<A>(y[k]);
      dx[k] = convert<T>(Log ? gk - fast_exp(yk) * s[j] : yk * (gk - s[j]));
    }
}

void check_backward_args(const Tensor& g, const Tensor& y, const char* op) {
  WEFT_CHECK(g.defined() && y.defined(), ValueError, op, ": undefined tensor");
  WEFT_CHECK(g.shape() == y.shape(), ShapeError, op, ": grad shape ", shape_str(g.shape()),
             " differs from output shape ", shape_str(y.shape()));
  WEFT_CHECK(g.dtype() == y.dtype(), DTypeError, op, ": grad is ", dtype_name(g.dtype()), " but output is ",
             dtype_name(y.dtype()));
}

template <bool Log>
Tensor softmax_backward_impl(const Tensor& grad_y, const Tensor& y, int64_t dim, const char* op) {
  check_backward_args(grad_y, y, op);
  const int64_t d = wrap_dim(dim, y.dim(), op);
  Tensor gc = grad_y.contiguous_untracked(), yc = y.contiguous_untracked();
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  const Lanes l = lanes_along(y.shape(), d);
  visit_floating(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dx.numel() == 0) return;
    const T* pg = gc.data<T>();
    const T* py = yc.data<T>();
    T* pd = dx.data<T>();
    for_each_lane(
        l, [&](int64_t o) { softmax_backward_row<T, Log>(pg + o * l.n, py + o * l.n, pd + o * l.n, l.n); },
        [&](int64_t o, int64_t c0, int64_t w) {
          int64_t base = o * l.n * l.inner + c0;
          softmax_backward_block<T, Log>(pg + base, py + base, pd + base, l.n, l.inner, w);
        });
  });
  return dx;
}

// ---- cross entropy ----

// logits [N, C, S...] as N x C x S, target as N x S.
struct ClassLayout {
  int64_t N = 1, C = 1, S = 1;
};

ClassLayout check_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, int64_t* count) {
  WEFT_CHECK(logits.defined() && target.defined(), ValueError, "cross_entropy: undefined tensor");
  WEFT_CHECK(is_floating(logits.dtype()), DTypeError, "cross_entropy: logits must be floating-point, got ",
             dtype_name(logits.dtype()));
  WEFT_CHECK(target.dtype() == DType::i64, DTypeError, "cross_entropy: target must hold i64 class indices, got ",
             dtype_name(target.dtype()), " (convert it with .to(DType::i64))");
  WEFT_CHECK(logits.dim() >= 1, ShapeError, "cross_entropy: logits must be [C] or [N, C, ...], got a 0-d tensor");
  Shape expected = logits.shape();
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  expected.erase(expected.begin() + class_dim);
  WEFT_CHECK(target.shape() == expected, ShapeError, "cross_entropy: target shape ", shape_str(target.shape()),
             " does not match logits ", shape_str(logits.shape()), " (expected target ", shape_str(expected),
             ": logits without the class dim ", class_dim, ")");
  ClassLayout c;
  c.C = logits.shape()[class_dim];
  c.N = class_dim == 1 ? logits.shape()[0] : 1;
  for (int64_t d = 2; d < logits.dim(); ++d) c.S *= logits.shape()[d];
  std::vector<int64_t> t = target.to_vector<int64_t>();
  int64_t counted = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore_index) continue;
    WEFT_CHECK(t[i] >= 0 && t[i] < c.C, IndexError, "cross_entropy: target value ", t[i], " at flat position ", i,
               " is out of range for ", c.C, " classes (expected 0..", c.C - 1, " or ignore_index ",
               ignore_index, ")");
    ++counted;
  }
  if (count) *count = counted;
  return c;
}

// One position: classes at p[c * st]. Returns its loss and writes its log-sum-exp. [N, C]
// logits (st = 1) take the vectorised row loops; others walk the strided classes.
template <typename T>
acc_type<T> cross_entropy_position(const T* p, int64_t C, int64_t st, int64_t t, double eps, acc_type<T>* lse) {
  using A = acc_type<T>;
  A m = -std::numeric_limits<A>::infinity(), s = 0;
  if (st == 1) {
    m = row_max<A>(p, C);
    s = row_sum_exp<A>(p, C, m);
  } else {
    for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<A>(p[c * st]));
    for (int64_t c = 0; c < C; ++c) s += fast_exp(static_cast<A>(p[c * st]) - m);
  }
  *lse = m + std::log(s);
  const A nll = *lse - static_cast<A>(p[t * st]);
  if (eps == 0) return nll;
  A total = 0;
  for (int64_t c = 0; c < C; ++c) total += static_cast<A>(p[c * st]);
  return A(1 - eps) * nll + A(eps) * (*lse - total / A(C));
}

template <typename T>
void cross_entropy_backward_position(const T* p, T* dx, int64_t C, int64_t st, int64_t t, double eps,
                                     acc_type<T> lse, acc_type<T> g) {
  using A = acc_type<T>;
  const A off = A(eps / static_cast<double>(C)), on = A(1 - eps) + off;
  int64_t c = 0;
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (st == 1) {
      for (; c + kLanes <= C; c += kLanes) {
        float w[kLanes];
        widen16(p + c, w);
#pragma omp simd simdlen(kLanes)
        for (int64_t j = 0; j < kLanes; ++j) w[j] = (fast_exp(w[j] - lse) - (c + j == t ? on : off)) * g;
        narrow16(w, dx + c);
      }
    }
  }
  for (; c < C; ++c) {
    const A prob = fast_exp(static_cast<A>(p[c * st]) - lse);
    dx[c * st] = convert<T>((prob - (c == t ? on : off)) * g);
  }
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_forward<false>(x, dim, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_forward<true>(x, dim, "log_softmax"); }
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<false>(grad_y, y, dim, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<true>(grad_y, y, dim, "log_softmax_backward");
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                          double label_smoothing) {
  CrossEntropyForward result;
  const ClassLayout k = check_cross_entropy(logits, target, ignore_index, &result.count);
  const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  result.loss = Tensor::empty(target.shape(), acc);
  result.lse = Tensor::empty(target.shape(), acc);
  Tensor xc = logits.contiguous_untracked(), tc = target.contiguous_untracked();
  visit_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    const T* px = xc.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    A* loss = result.loss.data<A>();
    A* lse = result.lse.data<A>();
    const int64_t positions = k.N * k.S;
#pragma omp parallel for if (positions * k.C >= kParallelGrain)
    for (int64_t i = 0; i < positions; ++i) {
      const int64_t n = i / k.S, s = i % k.S;
      if (pt[i] == ignore_index) {
        loss[i] = lse[i] = 0;
        continue;
      }
      const T* p = px + n * k.C * k.S + s;
      loss[i] = k.S == 1 ? cross_entropy_position(p, k.C, 1, pt[i], label_smoothing, &lse[i])
                         : cross_entropy_position(p, k.C, k.S, pt[i], label_smoothing, &lse[i]);
    }
  });
  return result;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, double scale, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, int64_t ignore_index, double label_smoothing) {
  const ClassLayout k = check_cross_entropy(logits, target, ignore_index, nullptr);
  const int64_t positions = k.N * k.S;
  WEFT_CHECK(grad_loss.numel() == 1 || grad_loss.shape() == target.shape(), ShapeError,
             "cross_entropy_backward: grad of shape ", shape_str(grad_loss.shape()),
             " is neither one element nor the target's shape ", shape_str(target.shape()));
  WEFT_CHECK(lse.shape() == target.shape(), ShapeError, "cross_entropy_backward: saved lse ",
             shape_str(lse.shape()), " does not match target ", shape_str(target.shape()));
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype());
  Tensor xc = logits.contiguous_untracked(), tc = target.contiguous_untracked();
  visit_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    Tensor gc = Tensor::empty(grad_loss.shape(), dtype_of<A>()).copy_(grad_loss);
    Tensor lc = Tensor::empty(lse.shape(), dtype_of<A>()).copy_(lse);
    const T* px = xc.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    const A* pg = gc.data<A>();
    const A* pl = lc.data<A>();
    T* pd = dx.data<T>();
    const bool broadcast = gc.numel() == 1;
#pragma omp parallel for if (positions * k.C >= kParallelGrain)
    for (int64_t i = 0; i < positions; ++i) {
      const int64_t n = i / k.S, s = i % k.S;
      const int64_t base = n * k.C * k.S + s;
      if (pt[i] == ignore_index) {
        for (int64_t c = 0; c < k.C; ++c) pd[base + c * k.S] = convert<T>(0.0f);
        continue;
      }
      const A g = (broadcast ? pg[0] : pg[i]) * static_cast<A>(scale);
      if (k.S == 1) cross_entropy_backward_position(px + base, pd + base, k.C, 1, pt[i], label_smoothing, pl[i], g);
      else cross_entropy_backward_position(px + base, pd + base, k.C, k.S, pt[i], label_smoothing, pl[i], g);
    }
  });
  return dx;
}

// ---- references: plain loops in f64 over the [outer, n, inner] layout ----

namespace reference {

namespace {
template <typename Fn>  // fn(values, outer, n, inner) rewrites values in place
Tensor along(const Tensor& x, int64_t dim, const char* op, Fn fn) {
  const int64_t d = wrap_dim(dim, x.dim(), op);
  std::vector<double> v = x.to_vector<double>();
  Lanes l = lanes_along(x.shape(), d);
  fn(v, l);
  return Tensor::from_vector(v, x.shape(), x.dtype());
}

template <bool Log>
Tensor forward(const Tensor& x, int64_t dim, const char* op) {
  return along(x, dim, op, [](std::vector<double>& v, const Lanes& l) {
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t j = 0; j < l.inner; ++j) {
        auto at = [&](int64_t i) -> double& { return v[(o * l.n + i) * l.inner + j]; };
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < l.n; ++i) m = std::max(m, at(i));
        for (int64_t i = 0; i < l.n; ++i) s += std::exp(at(i) - m);
        for (int64_t i = 0; i < l.n; ++i) at(i) = Log ? at(i) - m - std::log(s) : std::exp(at(i) - m) / s;
      }
  });
}

template <bool Log>
Tensor backward(const Tensor& grad_y, const Tensor& y, int64_t dim, const char* op) {
  check_backward_args(grad_y, y, op);
  std::vector<double> g = grad_y.to_vector<double>();
  return along(y, dim, op, [&](std::vector<double>& v, const Lanes& l) {
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t j = 0; j < l.inner; ++j) {
        auto k = [&](int64_t i) { return (o * l.n + i) * l.inner + j; };
        double s = 0;
        for (int64_t i = 0; i < l.n; ++i) s += Log ? g[k(i)] : g[k(i)] * v[k(i)];
        for (int64_t i = 0; i < l.n; ++i) v[k(i)] = Log ? g[k(i)] - std::exp(v[k(i)]) * s : v[k(i)] * (g[k(i)] - s);
      }
  });
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return forward<false>(x, dim, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return forward<true>(x, dim, "log_softmax"); }
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim) {
  return backward<false>(grad_y, y, dim, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim) {
  return backward<true>(grad_y, y, dim, "log_softmax_backward");
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  const ClassLayout k = check_cross_entropy(logits, target, ignore_index, nullptr);
  std::vector<double> x = logits.to_vector<double>();
  std::vector<int64_t> t = target.to_vector<int64_t>();
  std::vector<double> loss(t.size(), 0.0);
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t s = 0; s < k.S; ++s) {
      const int64_t i = n * k.S + s;
      if (t[i] == ignore_index) continue;
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < k.C; ++c) m = std::max(m, x[(n * k.C + c) * k.S + s]);
      for (int64_t c = 0; c < k.C; ++c) sum += std::exp(x[(n * k.C + c) * k.S + s] - m);
      auto logp = [&](int64_t c) { return x[(n * k.C + c) * k.S + s] - m - std::log(sum); };
      double smooth = 0;
      for (int64_t c = 0; c < k.C; ++c) smooth -= logp(c);
      loss[i] = (1 - label_smoothing) * -logp(t[i]) + label_smoothing * smooth / static_cast<double>(k.C);
    }
  return Tensor::from_vector(loss, target.shape(), DType::f64);
}

Tensor cross_entropy_backward(const Tensor& grad_loss, double scale, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index, double label_smoothing) {
  const ClassLayout k = check_cross_entropy(logits, target, ignore_index, nullptr);
  std::vector<double> x = logits.to_vector<double>();
  std::vector<double> g = grad_loss.to_vector<double>();
  std::vector<int64_t> t = target.to_vector<int64_t>();
  std::vector<double> dx(x.size(), 0.0);
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t s = 0; s < k.S; ++s) {
      const int64_t i = n * k.S + s;
      if (t[i] == ignore_index) continue;
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < k.C; ++c) m = std::max(m, x[(n * k.C + c) * k.S + s]);
      for (int64_t c = 0; c < k.C; ++c) sum += std::exp(x[(n * k.C + c) * k.S + s] - m);
      const double gi = (g.size() == 1 ? g[0] : g[i]) * scale;
      for (int64_t c = 0; c < k.C; ++c) {
        const int64_t at = (n * k.C + c) * k.S + s;
        const double q = (c == t[i] ? 1 - label_smoothing : 0) + label_smoothing / static_cast<double>(k.C);
        dx[at] = (std::exp(x[at] - m) / sum - q) * gi;
      }
    }
  return Tensor::from_vector(dx, logits.shape(), logits.dtype());
}

}  // namespace reference

}  // namespace weft::cpu
