#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"

namespace weft::cpu {

namespace {

// Rows of queries and of keys handled per tile. 64 x 64 f32 tiles of k^T and v (16 KiB each at
// D = 64) stay in L1 / L2 while every query row of a block streams past them.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;
// Query rows whose contributions to dk and dv the backward adds in one pass (four are written out
// by hand there).
constexpr int64_t kRowGroup = 4;

// The checked sizes of one call: `batch` rows of [T, D] matrices (the leading dims flattened).
struct Problem {
  int64_t batch = 1, Tq = 0, Tk = 0, D = 0, Dv = 0;
  int64_t offset = 0;  // Tk - Tq: causal query i sees keys 0 .. i + offset
  bool causal = false;
  // Keys 0 .. visible(i) - 1 are query i's (may be <= 0: none).
  int64_t visible(int64_t i) const { return causal ? std::min(Tk, i + offset + 1) : Tk; }
};

Problem check(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const char* op) {
  WEFT_CHECK(q.defined() && k.defined() && v.defined(), ValueError, op, ": undefined input");
  WEFT_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(), ShapeError, op,
             ": expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] of the same rank, got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  WEFT_CHECK(Shape(k.shape().begin(), k.shape().end() - 2) == lead &&
                 Shape(v.shape().begin(), v.shape().end() - 2) == lead && q.size(-1) == k.size(-1) &&
                 k.size(-2) == v.size(-2),
             ShapeError, op, ": expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading dims, got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
             " (expand the leading dims to one shape first)");
  WEFT_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError, op, ": q, k, v must share a dtype, got ",
             dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  WEFT_CHECK(is_floating(q.dtype()), DTypeError, op, ": expected floating-point inputs, got ", dtype_name(q.dtype()));
  Problem p;
  for (int64_t s : lead) p.batch *= s;
  p.Tq = q.size(-2);
  p.Tk = k.size(-2);
  p.D = q.size(-1);
  p.Dv = v.size(-1);
  p.offset = p.Tk - p.Tq;
  p.causal = causal;
  return p;
}

// A [..., T, C] tensor read in place: element (n, t, c) of the flattened leading dims sits at
// base[n] + t * row + c * col elements from data<T>().
struct Strided {
  std::vector<int64_t> base;
  int64_t row = 0, col = 0;
  int64_t at(int64_t n, int64_t t, int64_t c) const { return base[n] + t * row + c * col; }
};

Strided strided(const Tensor& t) {
  Strided s;
  s.row = t.strides()[t.dim() - 2];
  s.col = t.strides()[t.dim() - 1];
  const int64_t lead = t.dim() - 2;
  int64_t count = 1;
  for (int64_t d = 0; d < lead; ++d) count *= t.size(d);
  s.base.resize(count);
  for (int64_t n = 0; n < count; ++n) {
    int64_t rest = n, offset = 0;
    for (int64_t d = lead - 1; d >= 0; --d) {
      offset += (rest % t.size(d)) * t.strides()[d];
      rest /= t.size(d);
    }
    s.base[n] = offset;
  }
  return s;
}

// out[c] = sum_d x[d] * tile_t[d * kKeyBlock + c] for all kKeyBlock columns of a transposed tile
// (columns past the tile's keys hold zeros). The fixed trip count lets the compiler unroll the row
// of sums into four AVX-512 vectors it can hold across d (perf shows it still spills some to the
// stack), instead of a variable-length loop that loads and stores the row per d.
template <typename A>
void row_times_tile(const A* x, const A* tile_t, int64_t depth, A* out) {
  A acc[kKeyBlock] = {};
  for (int64_t d = 0; d < depth; ++d) {
    const A xd = x[d];
    const A* row = tile_t + d * kKeyBlock;
    for (int64_t c = 0; c < kKeyBlock; ++c) acc[c] += xd * row[c];
  }
  std::copy_n(acc, kKeyBlock, out);
}

// out[e] += sum_c x[c] * tile_t[e * kKeyBlock + c] for e < rows: a row times a tile whose columns
// are keys (x is zero past the tile's keys). Summing into a scalar per e, rather than adding x[c]
// times a key's row into out for each c, keeps out out of a load-store chain through memory.
template <typename A>
void add_row_times_tile_t(const A* x, const A* tile_t, int64_t rows, A* out) {
  for (int64_t e = 0; e < rows; ++e) {
    const A* row = tile_t + e * kKeyBlock;
    A sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < kKeyBlock; ++c) sum += x[c] * row[c];
    out[e] += sum;
  }
}

// ---- forward ----

// One task: rows i0 .. i0 + rows - 1 of batch row n, against every key they may see.
template <typename T>
struct ForwardTile {
  using A = acc_type<T>;
  std::vector<A> q, k_t, v_t, acc, m, l, s;
  explicit ForwardTile(const Problem& p)
      : q(kQueryBlock * p.D), k_t(p.D * kKeyBlock), v_t(p.Dv * kKeyBlock), acc(kQueryBlock * p.Dv), m(kQueryBlock),
        l(kQueryBlock), s(kKeyBlock) {}

  void run(const Problem& p, int64_t n, int64_t i0, A scale, const T* pq, const Strided& lq, const T* pk,
           const Strided& lk, const T* pv, const Strided& lv, T* out, A* lse) {
    const int64_t rows = std::min(kQueryBlock, p.Tq - i0), D = p.D, Dv = p.Dv;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d) q[r * D + d] = static_cast<A>(pq[lq.at(n, i0 + r, d)]) * scale;
    std::fill(acc.begin(), acc.end(), A(0));
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    std::fill(l.begin(), l.end(), A(0));
    const int64_t key_end = std::max<int64_t>(0, p.visible(i0 + rows - 1));  // the block's last row sees most
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, key_end - j0);
      // k and v transposed so the loops below run unit-stride over keys; zeros past the last key.
      for (int64_t c = 0; c < kKeyBlock; ++c) {
        for (int64_t d = 0; d < D; ++d) k_t[d * kKeyBlock + c] = c < cols ? static_cast<A>(pk[lk.at(n, j0 + c, d)]) : A(0);
        for (int64_t e = 0; e < Dv; ++e) v_t[e * kKeyBlock + c] = c < cols ? static_cast<A>(pv[lv.at(n, j0 + c, e)]) : A(0);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t seen = std::min(cols, p.visible(i0 + r) - j0);
        if (seen <= 0) continue;
        row_times_tile(&q[r * D], k_t.data(), D, s.data());
        const A m_new = std::max(m[r], *std::max_element(s.begin(), s.begin() + seen));
        const A rescale = std::exp(m[r] - m_new);  // 0 on the first block (m = -inf)
        A* o = &acc[r * Dv];
        A sum = l[r] * rescale;
        for (int64_t e = 0; e < Dv; ++e) o[e] *= rescale;
        for (int64_t c = 0; c < kKeyBlock; ++c) {  // s becomes the weights, zero past the row's keys
          s[c] = c < seen ? std::exp(s[c] - m_new) : A(0);
          sum += s[c];
        }
        add_row_times_tile_t(s.data(), v_t.data(), Dv, o);
        l[r] = sum;
        m[r] = m_new;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      T* row = out + (n * p.Tq + i) * Dv;
      if (p.visible(i) <= 0) {
        std::fill_n(row, Dv, convert<T>(std::numeric_limits<A>::quiet_NaN()));
        lse[n * p.Tq + i] = std::numeric_limits<A>::quiet_NaN();
        continue;
      }
      const A inv = A(1) / l[r];
      for (int64_t e = 0; e < Dv; ++e) row[e] = convert<T>(acc[r * Dv + e] * inv);
      lse[n * p.Tq + i] = m[r] + std::log(l[r]);
    }
  }
};

// ---- backward ----

// One task: every gradient of batch row n, walking key blocks (dk, dv finished per block) and,
// inside each, the query rows that see them, kRowGroup at a time (dq accumulated across blocks).
// s and ds hold the group's probabilities and score gradients, q and dout its rows.
template <typename T>
struct BackwardTile {
  using A = acc_type<T>;
  std::vector<A> k_t, v_t, dk, dv, dq, delta, q, dout, s, ds;
  explicit BackwardTile(const Problem& p)
      : k_t(p.D * kKeyBlock), v_t(p.Dv * kKeyBlock), dk(kKeyBlock * p.D), dv(kKeyBlock * p.Dv),
        dq(p.Tq * p.D), delta(p.Tq), q(kRowGroup * p.D), dout(kRowGroup * p.Dv), s(kRowGroup * kKeyBlock),
        ds(kRowGroup * kKeyBlock) {}

  void run(const Problem& p, int64_t n, A scale, const T* pg, const Strided& lg, const T* pq, const Strided& lq,
           const T* pk, const Strided& lk, const T* pv, const Strided& lv, const T* out, const A* lse, T* gq, T* gk,
           T* gv) {
    const int64_t D = p.D, Dv = p.Dv;
    for (int64_t i = 0; i < p.Tq; ++i) {
      A sum = 0;
      for (int64_t e = 0; e < Dv; ++e)
        sum += static_cast<A>(pg[lg.at(n, i, e)]) * static_cast<A>(out[(n * p.Tq + i) * Dv + e]);
      delta[i] = sum;
    }
    std::fill(dq.begin(), dq.end(), A(0));
    for (int64_t j0 = 0; j0 < p.Tk; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, p.Tk - j0);
      for (int64_t c = 0; c < kKeyBlock; ++c) {  // zeros past the last key
        for (int64_t d = 0; d < D; ++d)
          k_t[d * kKeyBlock + c] = c < cols ? static_cast<A>(pk[lk.at(n, j0 + c, d)]) : A(0);
        for (int64_t e = 0; e < Dv; ++e)
          v_t[e * kKeyBlock + c] = c < cols ? static_cast<A>(pv[lv.at(n, j0 + c, e)]) : A(0);
      }
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      const int64_t first = p.causal ? std::max<int64_t>(0, j0 - p.offset) : 0;  // earlier rows see none of it
      for (int64_t i = first; i < p.Tq; i += kRowGroup) {
        int64_t widest = 0;  // keys seen by the group's last row, the one that sees most
        for (int64_t r = 0; r < kRowGroup; ++r) {
          A *q_r = &q[r * D], *dout_r = &dout[r * Dv], *p_r = &s[r * kKeyBlock], *ds_r = &ds[r * kKeyBlock];
          // Past Tq, and past each row's last key, rows are zeros: they add nothing below.
          const int64_t seen = i + r < p.Tq ? std::min(cols, p.visible(i + r) - j0) : 0;
          std::fill_n(q_r, D, A(0));
          std::fill_n(dout_r, Dv, A(0));
          std::fill_n(p_r, kKeyBlock, A(0));
          std::fill_n(ds_r, kKeyBlock, A(0));
          if (seen <= 0) continue;
          widest = seen;
          for (int64_t d = 0; d < D; ++d) q_r[d] = static_cast<A>(pq[lq.at(n, i + r, d)]);
          for (int64_t e = 0; e < Dv; ++e) dout_r[e] = static_cast<A>(pg[lg.at(n, i + r, e)]);
          A scores[kKeyBlock], dp[kKeyBlock];
          row_times_tile(q_r, k_t.data(), D, scores);
          row_times_tile(dout_r, v_t.data(), Dv, dp);
          const A lse_i = lse[n * p.Tq + i + r], delta_i = delta[i + r];
          for (int64_t c = 0; c < seen; ++c) {
            p_r[c] = std::exp(scores[c] * scale - lse_i);
            ds_r[c] = p_r[c] * (dp[c] - delta_i);
          }
          add_row_times_tile_t(ds_r, k_t.data(), D, &dq[(i + r) * D]);
        }
        // dk and dv take the whole group at once: each of their rows is loaded and stored once
        // per kRowGroup query rows rather than once per row.
        for (int64_t c = 0; c < widest; ++c) {
          const A p0 = s[c], p1 = s[kKeyBlock + c], p2 = s[2 * kKeyBlock + c], p3 = s[3 * kKeyBlock + c];
          const A s0 = ds[c], s1 = ds[kKeyBlock + c], s2 = ds[2 * kKeyBlock + c], s3 = ds[3 * kKeyBlock + c];
          A* dv_c = &dv[c * Dv];
          A* dk_c = &dk[c * D];
          for (int64_t e = 0; e < Dv; ++e)
            dv_c[e] += p0 * dout[e] + p1 * dout[Dv + e] + p2 * dout[2 * Dv + e] + p3 * dout[3 * Dv + e];
          for (int64_t d = 0; d < D; ++d)
            dk_c[d] += s0 * q[d] + s1 * q[D + d] + s2 * q[2 * D + d] + s3 * q[3 * D + d];
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t d = 0; d < D; ++d) gk[(n * p.Tk + j0 + c) * D + d] = convert<T>(dk[c * D + d] * scale);
        for (int64_t e = 0; e < Dv; ++e) gv[(n * p.Tk + j0 + c) * Dv + e] = convert<T>(dv[c * Dv + e]);
      }
    }
    for (int64_t i = 0; i < p.Tq; ++i) {
      const A none = std::numeric_limits<A>::quiet_NaN();  // a row that saw no key, as its output
      for (int64_t d = 0; d < D; ++d)
        gq[(n * p.Tq + i) * D + d] = convert<T>(p.visible(i) > 0 ? dq[i * D + d] * scale : none);
    }
  }
};

// Work below this many multiply-adds runs on one thread.
bool worth_threads(const Problem& p) { return p.batch * p.Tq * p.Tk * (p.D + p.Dv) >= kParallelGrain; }

Shape with_last(const Tensor& t, std::initializer_list<int64_t> last) {
  Shape s(t.shape().begin(), t.shape().end() - 2);
  s.insert(s.end(), last);
  return s;
}

}  // namespace

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const Problem p = check(q, k, v, causal, "attention_forward");
  AttentionForward f;
  f.out = Tensor::empty(with_last(q, {p.Tq, p.Dv}), q.dtype());
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  f.lse = Tensor::empty(lse_shape, q.dtype() == DType::f64 ? DType::f64 : DType::f32);
  visit_floating(q.dtype(), "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    if (f.out.numel() == 0) return;
    const Strided lq = strided(q), lk = strided(k), lv = strided(v);
    const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    T* out = f.out.data<T>();
    A* lse = f.lse.data<A>();
    const int64_t blocks = (p.Tq + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel if (worth_threads(p))
    {
      ForwardTile<T> tile(p);
      // Causal blocks differ in cost (later rows see more keys), so tasks are handed out as
      // threads free up; each task's result does not depend on which thread runs it.
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < p.batch * blocks; ++task)
        tile.run(p, task / blocks, (task % blocks) * kQueryBlock, static_cast<A>(scale), pq, lq, pk, lk, pv, lv, out,
                 lse);
    }
  });
  return f;
}

AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, bool causal, double scale) {
  const Problem p = check(q, k, v, causal, "attention_backward");
  const Shape out_shape = with_last(q, {p.Tq, p.Dv});
  WEFT_CHECK(grad_out.defined() && out.defined() && lse.defined(), ValueError, "attention_backward: undefined input");
  WEFT_CHECK(grad_out.shape() == out_shape && out.shape() == out_shape, ShapeError,
             "attention_backward: expected grad_out and out of shape ", shape_str(out_shape), ", got ",
             shape_str(grad_out.shape()), " and ", shape_str(out.shape()));
  WEFT_CHECK(grad_out.dtype() == q.dtype() && out.dtype() == q.dtype(), DTypeError,
             "attention_backward: grad_out and out must be ", dtype_name(q.dtype()), " like q, got ",
             dtype_name(grad_out.dtype()), " and ", dtype_name(out.dtype()));
  const DType lse_dtype = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  WEFT_CHECK(lse.dtype() == lse_dtype && lse.numel() == p.batch * p.Tq, ShapeError,
             "attention_backward: expected lse as attention_forward returns it (", dtype_name(lse_dtype), ", ",
             p.batch * p.Tq, " elements), got ", dtype_name(lse.dtype()), " ", shape_str(lse.shape()));
  AttentionGrads g;
  g.dq = Tensor::empty(q.shape(), q.dtype());
  g.dk = Tensor::empty(k.shape(), q.dtype());
  g.dv = Tensor::empty(v.shape(), q.dtype());
  Tensor out_c = out.contiguous_untracked(), lse_c = lse.contiguous_untracked();
  visit_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_type<T>;
    if (g.dq.numel() + g.dk.numel() + g.dv.numel() == 0) return;
    const Strided lg = strided(grad_out), lq = strided(q), lk = strided(k), lv = strided(v);
    const T *pg = grad_out.data<T>(), *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
    const T* po = out_c.data<T>();
    const A* pl = lse_c.data<A>();
    T *gq = g.dq.data<T>(), *gk = g.dk.data<T>(), *gv = g.dv.data<T>();
#pragma omp parallel if (worth_threads(p))
    {
      BackwardTile<T> tile(p);
#pragma omp for schedule(dynamic)
      for (int64_t n = 0; n < p.batch; ++n)
        tile.run(p, n, static_cast<A>(scale), pg, lg, pq, lq, pk, lk, pv, lv, po, pl, gq, gk, gv);
    }
  });
  return g;
}

// ---- references: plain f64 loops, one query row at a time over all its keys ----

namespace reference {

namespace {

// Row i's probabilities over keys 0 .. visible - 1 and its log-sum-exp.
struct RowSoftmax {
  std::vector<double> p;
  double lse = 0;
};

RowSoftmax row_softmax(const std::vector<double>& q, const std::vector<double>& k, const Problem& p, int64_t n,
                       int64_t i, double scale) {
  RowSoftmax r;
  const int64_t visible = p.visible(i);
  r.p.assign(visible, 0.0);
  double top = -INFINITY, total = 0;
  for (int64_t j = 0; j < visible; ++j) {
    for (int64_t d = 0; d < p.D; ++d) r.p[j] += q[(n * p.Tq + i) * p.D + d] * k[(n * p.Tk + j) * p.D + d];
    r.p[j] *= scale;
    top = std::max(top, r.p[j]);
  }
  for (double& x : r.p) total += x = std::exp(x - top);
  for (double& x : r.p) x /= total;
  r.lse = top + std::log(total);
  return r;
}

}  // namespace

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const Problem p = check(q, k, v, causal, "reference::attention_forward");
  const std::vector<double> vq = q.to_vector<double>(), vk = k.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> out(p.batch * p.Tq * p.Dv, NAN), lse(p.batch * p.Tq, NAN);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t i = 0; i < p.Tq; ++i) {
      if (p.visible(i) <= 0) continue;
      const RowSoftmax r = row_softmax(vq, vk, p, n, i, scale);
      lse[n * p.Tq + i] = r.lse;
      for (int64_t e = 0; e < p.Dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < p.visible(i); ++j) acc += r.p[j] * vv[(n * p.Tk + j) * p.Dv + e];
        out[(n * p.Tq + i) * p.Dv + e] = acc;
      }
    }
  return {Tensor::from_vector(out, with_last(q, {p.Tq, p.Dv}), DType::f64),
          Tensor::from_vector(lse, Shape(q.shape().begin(), q.shape().end() - 1), DType::f64)};
}

AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  bool causal, double scale) {
  const Problem p = check(q, k, v, causal, "reference::attention_backward");
  const std::vector<double> vq = q.to_vector<double>(), vk = k.to_vector<double>(), vv = v.to_vector<double>(),
                            vg = grad_out.to_vector<double>();
  std::vector<double> dq(vq.size(), 0.0), dk(vk.size(), 0.0), dv(vv.size(), 0.0);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t i = 0; i < p.Tq; ++i) {
      const int64_t visible = p.visible(i);
      if (visible <= 0) {
        for (int64_t d = 0; d < p.D; ++d) dq[(n * p.Tq + i) * p.D + d] = NAN;
        continue;
      }
      const RowSoftmax r = row_softmax(vq, vk, p, n, i, scale);
      const double* g = &vg[(n * p.Tq + i) * p.Dv];
      std::vector<double> dp(visible, 0.0);
      double dot = 0;  // sum_j p_j dp_j, the softmax backward's subtracted term
      for (int64_t j = 0; j < visible; ++j) {
        for (int64_t e = 0; e < p.Dv; ++e) dp[j] += g[e] * vv[(n * p.Tk + j) * p.Dv + e];
        dot += r.p[j] * dp[j];
      }
      for (int64_t j = 0; j < visible; ++j) {
        const double ds = r.p[j] * (dp[j] - dot) * scale;
        for (int64_t e = 0; e < p.Dv; ++e) dv[(n * p.Tk + j) * p.Dv + e] += r.p[j] * g[e];
        for (int64_t d = 0; d < p.D; ++d) {
          dq[(n * p.Tq + i) * p.D + d] += ds * vk[(n * p.Tk + j) * p.D + d];
          dk[(n * p.Tk + j) * p.D + d] += ds * vq[(n * p.Tq + i) * p.D + d];
        }
      }
    }
  return {Tensor::from_vector(dq, q.shape(), DType::f64), Tensor::from_vector(dk, k.shape(), DType::f64),
          Tensor::from_vector(dv, v.shape(), DType::f64)};
}

}  // namespace reference

}  // namespace weft::cpu
