#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/norm.h"

#include <cmath>
#include <omp.h>
#include <type_traits>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"

namespace weft::cpu {

namespace {

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// weight / bias: undefined, or `size` elements of x's dtype (returned contiguous).
Tensor check_affine(const Tensor& p, int64_t size, DType dtype, const char* op, const char* name) {
  if (!p.defined()) return p;
  WEFT_CHECK(p.numel() == size, ShapeError, op, ": ", name, " has shape ", shape_str(p.shape()), " (", p.numel(),
             " elements) but ", size, " are normalised per group");
  WEFT_CHECK(p.dtype() == dtype, DTypeError, op, ": ", name, " is ", dtype_name(p.dtype()), " but x is ",
             dtype_name(dtype), " (convert one with .to())");
  return p.contiguous_untracked();
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// x as N x C x S for batch_norm.
struct ChannelLayout {
  int64_t N = 0, C = 0, S = 1;
  int64_t count() const { return N * S; }
};

ChannelLayout channel_layout(const Tensor& x, const char* op) {
  WEFT_CHECK(x.defined(), ValueError, op, ": undefined tensor");
  WEFT_CHECK(x.dim() >= 2, ShapeError, op, ": expected x [N, C] or [N, C, ...], got ", shape_str(x.shape()));
  ChannelLayout l{x.shape()[0], x.shape()[1], 1};
  for (int64_t d = 2; d < x.dim(); ++d) l.S *= x.shape()[d];
  return l;
}

void check_grad(const Tensor& g, const Tensor& x, const char* op) {
  WEFT_CHECK(g.defined(), ValueError, op, ": undefined gradient");
  WEFT_CHECK(g.shape() == x.shape() && g.dtype() == x.dtype(), ShapeError, op, ": gradient ",
             dtype_name(g.dtype()), " ", shape_str(g.shape()), " does not match x ", dtype_name(x.dtype()), " ",
             shape_str(x.shape()));
}

// Sums the per-thread partial rows (threads x D) into `out` in thread order, so a given thread
// count always gives the same bits.
template <typename T, typename A>
Tensor sum_partials(const std::vector<A>& partial, int threads, int64_t D, DType dtype) {
  Tensor out = Tensor::empty({D}, dtype);
  T* po = out.data<T>();
  for (int64_t j = 0; j < D; ++j) {
    A total = 0;
    for (int t = 0; t < threads; ++t) total += partial[t * D + j];
    po[j] = convert<T>(total);
  }
  return out;
}

}  // namespace

// ---- layer_norm ----

NormForward layer_norm(const Tensor& x, int64_t D, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  WEFT_CHECK(x.defined(), ValueError, "layer_norm: undefined tensor");
  WEFT_CHECK(D > 0 && x.numel() % D == 0, ShapeError, "layer_norm: cannot normalise groups of ", D,
             " elements in x of shape ", shape_str(x.shape()));
  Tensor weight = check_affine(weight_in, D, x.dtype(), "layer_norm", "weight");
  Tensor bias = check_affine(bias_in, D, x.dtype(), "layer_norm", "bias");
  const int64_t M = x.numel() / D;
  Tensor xc = x.contiguous_untracked();
  NormForward r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({M}, acc_dtype(x.dtype())),
                Tensor::empty({M}, acc_dtype(x.dtype()))};
  visit_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    const T* px = xc.data<T>();
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    T* py = r.y.data<T>();
    A* pm = r.mean.data<A>();
    A* pr = r.rstd.data<A>();
#pragma omp parallel for if (M * D >= kParallelGrain)
    for (int64_t i = 0; i < M; ++i) {
      const T* row = px + i * D;
      T* out = py + i * D;
      // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels
      // catastrophically when |mean| >> std; the row is in cache for the second pass anyway.
      // The sums run in SIMD lanes (16 partial sums, then added), not one after another.
      A sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < D; ++j) sum += static_cast<A>(row[j]);
      const A mu = sum / static_cast<A>(D);
      A var = 0;
#pragma omp simd reduction(+ : var)
      for (int64_t j = 0; j < D; ++j) {
        const A d = static_cast<A>(row[j]) - mu;
        var += d * d;
      }
      const A rs = A(1) / std::sqrt(var / static_cast<A>(D) + static_cast<A>(eps));
      if (w && b) {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j)
          out[j] = convert<T>((static_cast<A>(row[j]) - mu) * rs * static_cast<A>(w[j]) + static_cast<A>(b[j]));
      } else {
        for (int64_t j = 0; j < D; ++j) {
          const A xhat = (static_cast<A>(row[j]) - mu) * rs;
          out[j] = convert<T>(xhat * (w ? static_cast<A>(w[j]) : A(1)) + (b ? static_cast<A>(b[j]) : A(0)));
        }
      }
      pm[i] = mu;
      pr[i] = rs;
    }
  });
  return r;
}

NormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight_in, bool need_dweight, bool need_dbias) {
  check_grad(grad_y, x, "layer_norm_backward");
  const int64_t M = mean.numel();
  WEFT_CHECK(M > 0 && x.numel() % M == 0 && rstd.numel() == M, ShapeError, "layer_norm_backward: saved mean ",
             shape_str(mean.shape()), " / rstd ", shape_str(rstd.shape()), " do not fit x ", shape_str(x.shape()));
  const int64_t D = x.numel() / M;
  Tensor weight = check_affine(weight_in, D, x.dtype(), "layer_norm_backward", "weight");
  Tensor xc = x.contiguous_untracked(), gc = grad_y.contiguous_untracked();
  NormBackward r;
  r.dx = Tensor::empty(x.shape(), x.dtype());
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    WEFT_CHECK(mean.dtype() == dtype_of<A>() && rstd.dtype() == dtype_of<A>(), DTypeError,
               "layer_norm_backward: saved statistics are ", dtype_name(mean.dtype()), " / ",
               dtype_name(rstd.dtype()), ", expected ", dtype_name(dtype_of<A>()));
    const T* px = xc.data<T>();
    const T* pg = gc.data<T>();
    const T* w = ptr_or_null<T>(weight);
    Tensor mc = mean.contiguous_untracked(), rc = rstd.contiguous_untracked();
    const A* pm = mc.data<A>();
    const A* pr = rc.data<A>();
    T* pdx = r.dx.data<T>();
    // dweight / dbias sum over rows: each thread accumulates its own rows, summed afterwards.
    const bool parallel = M * D >= kParallelGrain;
    const int threads = parallel ? get_num_threads() : 1;
    std::vector<A> dw_partial(need_dweight ? threads * D : 0, A(0)), db_partial(need_dbias ? threads * D : 0, A(0));
#pragma omp parallel num_threads(threads) if (parallel)
    {
      A* dw = need_dweight ? dw_partial.data() + omp_get_thread_num() * D : nullptr;
      A* db = need_dbias ? db_partial.data() + omp_get_thread_num() * D : nullptr;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < M; ++i) {
        const T* row = px + i * D;
        const T* g = pg + i * D;
        T* out = pdx + i * D;
        const A mu = pm[i], rs = pr[i];
        A sum_dn = 0, sum_dn_xhat = 0;  // dn = dL/dxhat = g * w
#pragma omp simd reduction(+ : sum_dn, sum_dn_xhat)
        for (int64_t j = 0; j < D; ++j) {
          const A xhat = (static_cast<A>(row[j]) - mu) * rs;
          const A dn = static_cast<A>(g[j]) * (w ? static_cast<A>(w[j]) : A(1));
          sum_dn += dn;
          sum_dn_xhat += dn * xhat;
        }
        if (dw || db) {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const A gj = static_cast<A>(g[j]);
            if (dw) dw[j] += gj * ((static_cast<A>(row[j]) - mu) * rs);
            if (db) db[j] += gj;
          }
        }
        const A mean_dn = sum_dn / static_cast<A>(D), mean_dn_xhat = sum_dn_xhat / static_cast<A>(D);
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const A xhat = (static_cast<A>(row[j]) - mu) * rs;
          const A dn = static_cast<A>(g[j]) * (w ? static_cast<A>(w[j]) : A(1));
          out[j] = convert<T>((dn - mean_dn - xhat * mean_dn_xhat) * rs);
        }
      }
    }
    if (need_dweight) r.dweight = sum_partials<T>(dw_partial, threads, D, x.dtype());
    if (need_dbias) r.dbias = sum_partials<T>(db_partial, threads, D, x.dtype());
  });
  return r;
}

// ---- batch_norm ----

NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight_in, const Tensor& bias_in, bool use_batch_stats, double momentum,
                       double eps) {
  const ChannelLayout l = channel_layout(x, "batch_norm");
  Tensor weight = check_affine(weight_in, l.C, x.dtype(), "batch_norm", "weight");
  Tensor bias = check_affine(bias_in, l.C, x.dtype(), "batch_norm", "bias");
  WEFT_CHECK(running_mean.defined() == running_var.defined(), ValueError,
             "batch_norm: running_mean and running_var must be both defined or both undefined");
  for (const Tensor* t : {&running_mean, &running_var}) {
    if (!t->defined()) continue;
    WEFT_CHECK(t->shape() == Shape{l.C}, ShapeError, "batch_norm: running statistics of shape ", shape_str(t->shape()),
               " do not match ", l.C, " channels of x ", shape_str(x.shape()));
    WEFT_CHECK(is_floating(t->dtype()), DTypeError, "batch_norm: running statistics must be floating-point, got ",
               dtype_name(t->dtype()));
  }
  WEFT_CHECK(use_batch_stats || running_mean.defined(), ValueError,
             "batch_norm: normalising with running statistics needs running_mean and running_var");
  WEFT_CHECK(!use_batch_stats || l.count() > 1, ValueError, "batch_norm: expected more than 1 value per channel ",
             "to compute batch statistics, got x of shape ", shape_str(x.shape()));
  const DType acc = acc_dtype(x.dtype());
  NormForward r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({l.C}, acc), Tensor::empty({l.C}, acc)};
  Tensor batch_var = Tensor::empty({l.C}, acc);
  if (!use_batch_stats) {
    r.mean.copy_(running_mean);
    r.rstd.copy_(running_var);
  }
  Tensor xc = x.contiguous_untracked();
  visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    const T* px = xc.data<T>();
    const T* w = ptr_or_null<T>(weight);
    const T* b = ptr_or_null<T>(bias);
    T* py = r.y.data<T>();
    A* pm = r.mean.data<A>();
    A* pr = r.rstd.data<A>();
    A* pv = batch_var.data<A>();
    const A count = static_cast<A>(l.count());
#pragma omp parallel for if (l.N * l.C * l.S >= kParallelGrain)
    for (int64_t c = 0; c < l.C; ++c) {
      if (use_batch_stats) {
        A sum = 0;
        for (int64_t n = 0; n < l.N; ++n) {
          const T* plane = px + (n * l.C + c) * l.S;
          for (int64_t s = 0; s < l.S; ++s) sum += static_cast<A>(plane[s]);
        }
        const A mu = sum / count;
        A var = 0;
        for (int64_t n = 0; n < l.N; ++n) {
          const T* plane = px + (n * l.C + c) * l.S;
          for (int64_t s = 0; s < l.S; ++s) {
            const A d = static_cast<A>(plane[s]) - mu;
            var += d * d;
          }
        }
        pm[c] = mu;
        pv[c] = var / count;
        pr[c] = A(1) / std::sqrt(pv[c] + static_cast<A>(eps));
      } else {
        pr[c] = A(1) / std::sqrt(pr[c] + static_cast<A>(eps));  // pr held running_var
      }
      // y = x * scale + shift with the channel's constants folded.
      const A scale = pr[c] * (w ? static_cast<A>(w[c]) : A(1));
      const A shift = (b ? static_cast<A>(b[c]) : A(0)) - pm[c] * scale;
      for (int64_t n = 0; n < l.N; ++n) {
        const T* plane = px + (n * l.C + c) * l.S;
        T* out = py + (n * l.C + c) * l.S;
        for (int64_t s = 0; s < l.S; ++s) out[s] = convert<T>(static_cast<A>(plane[s]) * scale + shift);
      }
    }
  });
  if (use_batch_stats && running_mean.defined()) {
    std::vector<double> rm = running_mean.to_vector<double>(), rv = running_var.to_vector<double>();
    std::vector<double> bm = r.mean.to_vector<double>(), bv = batch_var.to_vector<double>();
    const double unbias = static_cast<double>(l.count()) / static_cast<double>(l.count() - 1);
    for (int64_t c = 0; c < l.C; ++c) {
      rm[c] = (1 - momentum) * rm[c] + momentum * bm[c];
      rv[c] = (1 - momentum) * rv[c] + momentum * bv[c] * unbias;
    }
    Tensor(running_mean).copy_(Tensor::from_vector(rm, running_mean.shape(), DType::f64));
    Tensor(running_var).copy_(Tensor::from_vector(rv, running_var.shape(), DType::f64));
  }
  return r;
}

NormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight_in, bool used_batch_stats, bool need_dweight, bool need_dbias) {
  check_grad(grad_y, x, "batch_norm_backward");
  const ChannelLayout l = channel_layout(x, "batch_norm_backward");
  WEFT_CHECK(mean.numel() == l.C && rstd.numel() == l.C, ShapeError, "batch_norm_backward: saved mean ",
             shape_str(mean.shape()), " / rstd ", shape_str(rstd.shape()), " do not match ", l.C, " channels");
  Tensor weight = check_affine(weight_in, l.C, x.dtype(), "batch_norm_backward", "weight");
  Tensor xc = x.contiguous_untracked(), gc = grad_y.contiguous_untracked();
  NormBackward r;
  r.dx = Tensor::empty(x.shape(), x.dtype());
  if (need_dweight) r.dweight = Tensor::empty({l.C}, x.dtype());
  if (need_dbias) r.dbias = Tensor::empty({l.C}, x.dtype());
  visit_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    WEFT_CHECK(mean.dtype() == dtype_of<A>() && rstd.dtype() == dtype_of<A>(), DTypeError,
               "batch_norm_backward: saved statistics are ", dtype_name(mean.dtype()), " / ",
               dtype_name(rstd.dtype()), ", expected ", dtype_name(dtype_of<A>()));
    const T* px = xc.data<T>();
    const T* pg = gc.data<T>();
    const T* w = ptr_or_null<T>(weight);
    Tensor mc = mean.contiguous_untracked(), rc = rstd.contiguous_untracked();
    const A* pm = mc.data<A>();
    const A* pr = rc.data<A>();
    T* pdx = r.dx.data<T>();
    T* pdw = ptr_or_null<T>(r.dweight);
    T* pdb = ptr_or_null<T>(r.dbias);
    const A count = static_cast<A>(l.count());
#pragma omp parallel for if (l.N * l.C * l.S >= kParallelGrain)
    for (int64_t c = 0; c < l.C; ++c) {
      const A mu = pm[c], rs = pr[c];
      A sum_g = 0, sum_g_xhat = 0;
      for (int64_t n = 0; n < l.N; ++n) {
        const T* plane = px + (n * l.C + c) * l.S;
        const T* g = pg + (n * l.C + c) * l.S;
        for (int64_t s = 0; s < l.S; ++s) {
          const A gs = static_cast<A>(g[s]);
          sum_g += gs;
          sum_g_xhat += gs * (static_cast<A>(plane[s]) - mu) * rs;
        }
      }
      if (pdw) pdw[c] = convert<T>(sum_g_xhat);
      if (pdb) pdb[c] = convert<T>(sum_g);
      const A k = rs * (w ? static_cast<A>(w[c]) : A(1));
      // With batch statistics, mean and variance depend on x too, which subtracts the
      // projections of g onto 1 and onto xhat; with fixed statistics it is just the affine map.
      const A mean_g = used_batch_stats ? sum_g / count : A(0);
      const A mean_g_xhat = used_batch_stats ? sum_g_xhat / count : A(0);
      for (int64_t n = 0; n < l.N; ++n) {
        const T* plane = px + (n * l.C + c) * l.S;
        const T* g = pg + (n * l.C + c) * l.S;
        T* out = pdx + (n * l.C + c) * l.S;
        for (int64_t s = 0; s < l.S; ++s) {
          const A xhat = (static_cast<A>(plane[s]) - mu) * rs;
          out[s] = convert<T>(k * (static_cast<A>(g[s]) - mean_g - xhat * mean_g_xhat));
        }
      }
    }
  });
  return r;
}

// ---- references: plain f64 loops ----

namespace reference {

namespace {
std::vector<double> values_or(const Tensor& t, int64_t n, double fill) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(n, fill);
}
}  // namespace

NormForward layer_norm(const Tensor& x, int64_t D, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t M = x.numel() / D;
  std::vector<double> v = x.to_vector<double>(), w = values_or(weight, D, 1), b = values_or(bias, D, 0);
  std::vector<double> mean(M), rstd(M);
  for (int64_t i = 0; i < M; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < D; ++j) mu += v[i * D + j] / static_cast<double>(D);
    for (int64_t j = 0; j < D; ++j) var += (v[i * D + j] - mu) * (v[i * D + j] - mu) / static_cast<double>(D);
    mean[i] = mu;
    rstd[i] = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < D; ++j) v[i * D + j] = (v[i * D + j] - mu) * rstd[i] * w[j] + b[j];
  }
  const DType acc = acc_dtype(x.dtype());
  return {Tensor::from_vector(v, x.shape(), x.dtype()), Tensor::from_vector(mean, {M}, acc),
          Tensor::from_vector(rstd, {M}, acc)};
}

NormBackward layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool need_dweight, bool need_dbias) {
  const int64_t M = mean.numel(), D = x.numel() / M;
  std::vector<double> v = x.to_vector<double>(), g = grad_y.to_vector<double>(), w = values_or(weight, D, 1);
  std::vector<double> mu = mean.to_vector<double>(), rs = rstd.to_vector<double>();
  std::vector<double> dx(v.size()), dw(D, 0.0), db(D, 0.0);
  for (int64_t i = 0; i < M; ++i) {
    auto xhat = [&](int64_t j) { return (v[i * D + j] - mu[i]) * rs[i]; };
    double mean_dn = 0, mean_dn_xhat = 0;
    for (int64_t j = 0; j < D; ++j) {
      mean_dn += g[i * D + j] * w[j] / static_cast<double>(D);
      mean_dn_xhat += g[i * D + j] * w[j] * xhat(j) / static_cast<double>(D);
      dw[j] += g[i * D + j] * xhat(j);
      db[j] += g[i * D + j];
    }
    for (int64_t j = 0; j < D; ++j) dx[i * D + j] = rs[i] * (g[i * D + j] * w[j] - mean_dn - xhat(j) * mean_dn_xhat);
  }
  NormBackward r;
  r.dx = Tensor::from_vector(dx, x.shape(), x.dtype());
  if (need_dweight) r.dweight = Tensor::from_vector(dw, Shape{D}, x.dtype());
  if (need_dbias) r.dbias = Tensor::from_vector(db, {D}, x.dtype());
  return r;
}

NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool use_batch_stats, double eps) {
  const ChannelLayout l = channel_layout(x, "batch_norm");
  std::vector<double> v = x.to_vector<double>(), w = values_or(weight, l.C, 1), b = values_or(bias, l.C, 0);
  std::vector<double> mean(l.C), rstd(l.C);
  auto at = [&](int64_t n, int64_t c, int64_t s) -> double& { return v[(n * l.C + c) * l.S + s]; };
  const double count = static_cast<double>(l.count());
  for (int64_t c = 0; c < l.C; ++c) {
    double mu = 0, var = 0;
    if (use_batch_stats) {
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) mu += at(n, c, s) / count;
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) var += (at(n, c, s) - mu) * (at(n, c, s) - mu) / count;
    } else {
      mu = running_mean.to_vector<double>()[c];
      var = running_var.to_vector<double>()[c];
    }
    mean[c] = mu;
    rstd[c] = 1 / std::sqrt(var + eps);
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t s = 0; s < l.S; ++s) at(n, c, s) = (at(n, c, s) - mu) * rstd[c] * w[c] + b[c];
  }
  const DType acc = acc_dtype(x.dtype());
  return {Tensor::from_vector(v, x.shape(), x.dtype()), Tensor::from_vector(mean, {l.C}, acc),
          Tensor::from_vector(rstd, {l.C}, acc)};
}

NormBackward batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& weight, bool used_batch_stats, bool need_dweight, bool need_dbias) {
  const ChannelLayout l = channel_layout(x, "batch_norm_backward");
  std::vector<double> v = x.to_vector<double>(), g = grad_y.to_vector<double>(), w = values_or(weight, l.C, 1);
  std::vector<double> mu = mean.to_vector<double>(), rs = rstd.to_vector<double>();
  std::vector<double> dx(v.size()), dw(l.C, 0.0), db(l.C, 0.0);
  const double count = static_cast<double>(l.count());
  for (int64_t c = 0; c < l.C; ++c) {
    auto k = [&](int64_t n, int64_t s) { return (n * l.C + c) * l.S + s; };
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t s = 0; s < l.S; ++s) {
        dw[c] += g[k(n, s)] * (v[k(n, s)] - mu[c]) * rs[c];
        db[c] += g[k(n, s)];
      }
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t s = 0; s < l.S; ++s) {
        const double xhat = (v[k(n, s)] - mu[c]) * rs[c];
        const double centred = used_batch_stats ? g[k(n, s)] - db[c] / count - xhat * dw[c] / count : g[k(n, s)];
        dx[k(n, s)] = w[c] * rs[c] * centred;
      }
  }
  NormBackward r;
  r.dx = Tensor::from_vector(dx, x.shape(), x.dtype());
  if (need_dweight) r.dweight = Tensor::from_vector(dw, Shape{l.C}, x.dtype());
  if (need_dbias) r.dbias = Tensor::from_vector(db, {l.C}, x.dtype());
  return r;
}

}  // namespace reference

}  // namespace weft::cpu
