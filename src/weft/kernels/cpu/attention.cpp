#include "weft/kernels/cpu/dispatch.h"
#include "weft/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/fast_math.h"

#include "weft/core/immintrin.h"

namespace weft::cpu {

namespace {

// Rows of queries and of keys per tile. A 64 x 64 f32 tile is 16 KiB: the score and probability
// tiles and the k / v tiles of one step stay in L1 / L2 while the step's products run over them.
constexpr int64_t kBlock = 64;
// The tile products below work on kRows rows at a time (what the AVX-512 kernel holds in
// registers) and on widths that are whole vectors of kLanes f32. Tiles are zero-padded to these
// multiples, and the padding adds nothing to any sum.
constexpr int64_t kRows = 4;
constexpr int64_t kLanes = 16;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The checked sizes of one call: `batch` rows of [T, D] matrices (the leading dims flattened).
struct Problem {
  int64_t batch = 1, Tq = 0, Tk = 0, D = 0, Dv = 0;
  int64_t offset = 0;  // Tk - Tq: causal query i sees keys 0 .. i + offset
  bool causal = false;
  // Keys 0 .. visible(i) - 1 are query i's (may be <= 0: none).
  int64_t visible(int64_t i) const { return causal ? std::min(Tk, i + offset + 1) : Tk; }
  // How many of keys j0 .. j0 + cols - 1 query i sees: a prefix of them, maybe empty.
  int64_t seen(int64_t i, int64_t j0, int64_t cols) const { return std::clamp<int64_t>(visible(i) - j0, 0, cols); }
  // The first query row at or after i0 that sees key j (causal rows see a key from j - offset on).
  int64_t first_seeing(int64_t j, int64_t i0) const { return causal ? std::max(i0, j - offset) : i0; }
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

// dst[r * width + c] = scale * element (n, t0 + r, c) for r < count and c < cols, and zeros in
// the rest of the [rows, width] tile. The row's address is computed once and the inner loop runs
// along the row (unit stride for the usual layouts, which lets it vectorise): per element through
// Strided::at, the copies took half the forward's time at T = 64.
template <typename T, typename A>
void read_tile(const T* data, const Strided& layout, int64_t n, int64_t t0, int64_t count, int64_t cols, A scale,
               A* dst, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    A* row = dst + r * width;
    int64_t c = 0;
    if (r < count) {
      const T* src = data + layout.at(n, t0 + r, 0);
      if (layout.col == 1)
        for (; c < cols; ++c) row[c] = static_cast<A>(src[c]) * scale;
      else
        for (; c < cols; ++c) row[c] = static_cast<A>(src[c * layout.col]) * scale;
    }
    std::fill(row + c, row + width, A(0));
  }
}

// dst[c * rows + r] = src[r * width + c] for r < rows, c < cols: a tile of keys by features turned
// into features by keys, so a score row comes out of one product along the keys.
template <typename A>
void transpose(const A* src, int64_t rows, int64_t width, int64_t cols, A* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * width + c];
}

// ---- tile products and row softmax: plain loops (the f64 path), vectorised for f32 ----
//
// The first version used fixed-width loops and std::exp: on a quiet machine the fused op took
// 1.5x to 2.2x the composed op's time (oneDNN GEMMs + softmax), with a 64^3 tile product at 43
// GFLOP/s and one scalar libm expf per score in the forward and again in the backward. The
// AVX-512 product kernel keeps a 4 x 64 block of the result in registers across the whole depth,
// and the exponentials are vectorised (docs/attention.md has what each step was worth).

// c[r * ldc + j] += sum_k a[r * a_row + k * a_depth] * b[k * ldb + j] for r < rows, j < width: a
// [rows, depth] read through two strides (so the transposed probabilities in dv += p^T dout need
// no copy) times a row-major b. rows is a multiple of kRows and width of kLanes; b and c have
// width columns. Every element is summed over k in increasing order, here and in the f32 kernel.
template <typename A>
void add_product(const A* a, int64_t a_row, int64_t a_depth, const A* b, int64_t ldb, int64_t rows, int64_t depth,
                 int64_t width, A* c, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < depth; ++k) {
      const A x = a[r * a_row + k * a_depth];
      for (int64_t j = 0; j < width; ++j) c[r * ldc + j] += x * b[k * ldb + j];
    }
}

// The largest of s[0 .. n), n >= 1.
template <typename A>
A row_max(const A* s, int64_t n) {
  return *std::max_element(s, s + n);
}

// s[c] = exp(s[c] - shift) for c < n and 0 for n <= c < kBlock (keys the row may not see, or past
// the tile's last key); returns the sum of the new s.
template <typename A>
A exp_row(A* s, int64_t n, A shift) {
  A sum = 0;
  for (int64_t c = 0; c < kBlock; ++c) sum += s[c] = c < n ? std::exp(s[c] - shift) : A(0);
  return sum;
}

#ifdef __AVX512F__
// kRows rows by `vectors` vectors of c, held in registers over the whole depth: per k, `vectors`
// loads of b and kRows broadcasts of a feed kRows * vectors FMAs (16 accumulators at 4 vectors,
// which leaves registers for b).
template <int vectors>
void add_product_block(const float* a, int64_t a_row, int64_t a_depth, const float* b, int64_t ldb, int64_t depth,
                       float* c, int64_t ldc) {
  __m512 acc[kRows][vectors];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_loadu_ps(c + r * ldc + v * kLanes);
  for (int64_t k = 0; k < depth; ++k) {
    __m512 b_k[vectors];
    for (int v = 0; v < vectors; ++v) {
      b_k[v] = _mm512_loadu_ps(b + k * ldb + v * kLanes);
      // An empty asm that "changes" the register: otherwise GCC folds the load into each of the
      // kRows FMAs that use it, 20 loads per k instead of 8, and the whole forward or backward
      // took 20% to 30% longer ([8, 4, 64, 64], one thread).
      asm("" : "+v"(b_k[v]));
    }
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * a_row + k * a_depth]);
      for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_fmadd_ps(x, b_k[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < vectors; ++v) _mm512_storeu_ps(c + r * ldc + v * kLanes, acc[r][v]);
}

void add_product(const float* a, int64_t a_row, int64_t a_depth, const float* b, int64_t ldb, int64_t rows,
                 int64_t depth, int64_t width, float* c, int64_t ldc) {
  for (int64_t r = 0; r < rows; r += kRows)
    for (int64_t j = 0; j < width; j += 4 * kLanes) {
      const float* a_r = a + r * a_row;
      float* c_rj = c + r * ldc + j;
      switch (std::min<int64_t>(4, (width - j) / kLanes)) {
        case 4: add_product_block<4>(a_r, a_row, a_depth, b + j, ldb, depth, c_rj, ldc); break;
        case 3: add_product_block<3>(a_r, a_row, a_depth, b + j, ldb, depth, c_rj, ldc); break;
        case 2: add_product_block<2>(a_r, a_row, a_depth, b + j, ldb, depth, c_rj, ldc); break;
        default: add_product_block<1>(a_r, a_row, a_depth, b + j, ldb, depth, c_rj, ldc); break;
      }
    }
}

// The first `n` of 16 lanes.
__mmask16 first_lanes(int64_t n) {
  return n >= kLanes ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

float row_max(const float* s, int64_t n) {
  __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < n; c += kLanes) {
    const __mmask16 live = first_lanes(n - c);
    top = _mm512_mask_max_ps(top, live, top, _mm512_maskz_loadu_ps(live, s + c));
  }
  return _mm512_reduce_max_ps(top);
}

#endif

// f32 (the f32, bf16 and f16 inputs): fast_exp, which GCC vectorises, instead of a libm call per
// score. Its clamp makes exp of a score 87 below the row's maximum 1e-38 rather than 0, nothing
// beside the maximum's 1.
float exp_row(float* s, int64_t n, float shift) {
  for (int64_t c = 0; c < kBlock; ++c) s[c] = c < n ? fast_exp(s[c] - shift) : 0.0f;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < kBlock; ++c) sum += s[c];
  return sum;
}

// ---- forward ----

// One task: rows i0 .. i0 + rows - 1 of batch row n, against every key they may see. Tiles: q
// [kBlock, D] (scaled), k [kBlock, D] and k^T [D, kBlock], v and the unnormalised output [kBlock,
// width], scores / probabilities [kBlock, kBlock]; width is Dv rounded up to whole vectors.
template <typename T>
struct ForwardTile {
  using A = acc_type<T>;
  int64_t D, Dv, width;
  std::vector<A> q, k, k_t, v, s, o, m, l;
  explicit ForwardTile(const Problem& p)
      : D(p.D), Dv(p.Dv), width(round_up(p.Dv, kLanes)), q(kBlock * p.D), k(kBlock * p.D), k_t(p.D * kBlock),
        v(kBlock * width), s(kBlock * kBlock), o(kBlock * width), m(kBlock), l(kBlock) {}
  // This thread's tiles for `p`'s sizes, kept from call to call: a decoding step calls attention
  // with one query per sequence, and allocating and zeroing the tiles each time took about as long
  // as the arithmetic. (run() writes every element it reads, as between the tasks of one call.)
  static ForwardTile& for_this_thread(const Problem& p) {
    thread_local std::unique_ptr<ForwardTile> tile;
    if (!tile || tile->D != p.D || tile->Dv != p.Dv) tile = std::make_unique<ForwardTile>(p);
    return *tile;
  }

  void run(const Problem& p, int64_t n, int64_t i0, A scale, const T* pq, const Strided& lq, const T* pk,
           const Strided& lk, const T* pv, const Strided& lv, T* out, A* lse) {
    const int64_t rows = std::min(kBlock, p.Tq - i0), padded = round_up(rows, kRows), D = p.D, Dv = p.Dv;
    read_tile(pq, lq, n, i0, rows, D, scale, q.data(), padded, D);  // rows past the block's: scores 0, weights 0
    std::fill(o.begin(), o.end(), A(0));
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    std::fill(l.begin(), l.end(), A(0));
    const int64_t key_end = std::max<int64_t>(0, p.visible(i0 + rows - 1));  // the block's last row sees most
    for (int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
      const int64_t cols = std::min(kBlock, key_end - j0);
      // Zeros past the last key and past Dv.
      read_tile(pk, lk, n, j0, cols, D, A(1), k.data(), kBlock, D);
      transpose(k.data(), kBlock, D, D, k_t.data());
      read_tile(pv, lv, n, j0, cols, Dv, A(1), v.data(), kBlock, width);
      // Causal row groups stop at the last key their last row sees (on a diagonal tile, about half
      // the products); the scores past it stay zero and get weight zero.
      std::fill(s.begin(), s.end(), A(0));
      for (int64_t r0 = 0; r0 < padded; r0 += kRows) {
        const int64_t keys = p.seen(i0 + std::min(r0 + kRows, rows) - 1, j0, cols);
        add_product(&q[r0 * D], D, 1, k_t.data(), kBlock, kRows, D, round_up(keys, kLanes), &s[r0 * kBlock], kBlock);
      }
      for (int64_t r = 0; r < rows; ++r) {
        A* s_r = &s[r * kBlock];
        const int64_t seen = p.seen(i0 + r, j0, cols);
        if (seen == 0) {
          std::fill_n(s_r, kBlock, A(0));
          continue;
        }
        const A m_new = std::max(m[r], row_max(s_r, seen));
        const A rescale = std::exp(m[r] - m_new);  // 0 on the first block (m = -inf)
        l[r] = l[r] * rescale + exp_row(s_r, seen, m_new);
        for (int64_t e = 0; e < width; ++e) o[r * width + e] *= rescale;
        m[r] = m_new;
      }
      for (int64_t r0 = 0; r0 < padded; r0 += kRows) {
        const int64_t keys = p.seen(i0 + std::min(r0 + kRows, rows) - 1, j0, cols);
        add_product(&s[r0 * kBlock], kBlock, 1, v.data(), width, kRows, keys, width, &o[r0 * width], width);
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
      for (int64_t e = 0; e < Dv; ++e) row[e] = convert<T>(o[r * width + e] * inv);
      lse[n * p.Tq + i] = m[r] + std::log(l[r]);
    }
  }
};

// ---- backward ----

// One task: every gradient of batch row n. q (scaled, as the forward's scores used it), dout and
// the dq accumulator are read in once as f32 [Tq + kRows, width] (the extra rows are zeros for
// padded row groups); then per key block (dk, dv finished per block) and per query block that
// sees it: the score and dp tiles, p = exp(s - lse) and ds = p (dp - D_i) in place of them, and
// the three products into dv, dk and dq.
template <typename T>
struct BackwardTile {
  using A = acc_type<T>;
  int64_t width_q, width_v;  // D and Dv rounded up to whole vectors
  std::vector<A> q, dout, dq, delta, k_t, k, v, v_t, s, ds, dk, dv;
  explicit BackwardTile(const Problem& p)
      : width_q(round_up(p.D, kLanes)), width_v(round_up(p.Dv, kLanes)), q((p.Tq + kRows) * width_q),
        dout((p.Tq + kRows) * width_v), dq((p.Tq + kRows) * width_q), delta(p.Tq), k_t(p.D * kBlock),
        k(kBlock * width_q), v(kBlock * p.Dv), v_t(p.Dv * kBlock), s(kBlock * kBlock), ds(kBlock * kBlock),
        dk(kBlock * width_q), dv(kBlock * width_v) {}

  void run(const Problem& p, int64_t n, A scale, const T* pg, const Strided& lg, const T* pq, const Strided& lq,
           const T* pk, const Strided& lk, const T* pv, const Strided& lv, const T* out, const A* lse, T* gq, T* gk,
           T* gv) {
    const int64_t D = p.D, Dv = p.Dv, wq = width_q, wv = width_v;
    read_tile(pq, lq, n, 0, p.Tq, D, scale, q.data(), p.Tq + kRows, wq);
    read_tile(pg, lg, n, 0, p.Tq, Dv, A(1), dout.data(), p.Tq + kRows, wv);
    for (int64_t i = 0; i < p.Tq; ++i) {
      A sum = 0;
      for (int64_t e = 0; e < Dv; ++e) sum += dout[i * wv + e] * static_cast<A>(out[(n * p.Tq + i) * Dv + e]);
      delta[i] = sum;
    }
    std::fill(dq.begin(), dq.end(), A(0));
    for (int64_t j0 = 0; j0 < p.Tk; j0 += kBlock) {
      const int64_t cols = std::min(kBlock, p.Tk - j0), padded_keys = round_up(cols, kRows);
      read_tile(pk, lk, n, j0, cols, D, A(1), k.data(), kBlock, wq);  // zeros past the last key and D
      transpose(k.data(), kBlock, wq, D, k_t.data());
      read_tile(pv, lv, n, j0, cols, Dv, A(1), v.data(), kBlock, Dv);
      transpose(v.data(), kBlock, Dv, Dv, v_t.data());
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      const int64_t first = p.causal ? std::max<int64_t>(0, j0 - p.offset) : 0;  // earlier rows see none of it
      for (int64_t i0 = first; i0 < p.Tq; i0 += kBlock) {
        const int64_t rows = std::min(kBlock, p.Tq - i0), padded = round_up(rows, kRows);
        // Scores and dp, each causal row group only up to the last key its last row sees.
        std::fill(s.begin(), s.end(), A(0));
        std::fill(ds.begin(), ds.end(), A(0));
        for (int64_t r0 = 0; r0 < padded; r0 += kRows) {
          const int64_t scored = round_up(p.seen(i0 + std::min(r0 + kRows, rows) - 1, j0, cols), kLanes);
          add_product(&q[(i0 + r0) * wq], wq, 1, k_t.data(), kBlock, kRows, D, scored, &s[r0 * kBlock], kBlock);
          add_product(&dout[(i0 + r0) * wv], wv, 1, v_t.data(), kBlock, kRows, Dv, scored, &ds[r0 * kBlock], kBlock);
        }
        for (int64_t r = 0; r < padded; ++r) {
          A *p_r = &s[r * kBlock], *ds_r = &ds[r * kBlock];
          // Rows past Tq, and keys past a row's last one, get p = ds = 0 and add nothing below.
          const int64_t seen = r < rows ? p.seen(i0 + r, j0, cols) : 0;
          if (seen == 0) {
            std::fill_n(p_r, kBlock, A(0));
            std::fill_n(ds_r, kBlock, A(0));
            continue;
          }
          exp_row(p_r, seen, lse[n * p.Tq + i0 + r]);
          const A delta_i = delta[i0 + r];
          for (int64_t c = 0; c < kBlock; ++c) ds_r[c] = p_r[c] * (ds_r[c] - delta_i);
        }
        // dv += p^T dout and dk += ds^T (scale q), the tiles read transposed through their strides;
        // each group of keys sums only over the query rows from the first that sees it.
        for (int64_t c0 = 0; c0 < padded_keys; c0 += kRows) {
          const int64_t from = p.first_seeing(j0 + c0, i0) - i0;
          if (from >= padded) continue;
          add_product(&s[from * kBlock + c0], 1, kBlock, &dout[(i0 + from) * wv], wv, kRows, padded - from, wv,
                      &dv[c0 * wv], wv);
          add_product(&ds[from * kBlock + c0], 1, kBlock, &q[(i0 + from) * wq], wq, kRows, padded - from, wq,
                      &dk[c0 * wq], wq);
        }
        for (int64_t r0 = 0; r0 < padded; r0 += kRows) {
          const int64_t keys = p.seen(i0 + std::min(r0 + kRows, rows) - 1, j0, cols);
          add_product(&ds[r0 * kBlock], kBlock, 1, k.data(), wq, kRows, keys, wq, &dq[(i0 + r0) * wq], wq);
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t d = 0; d < D; ++d) gk[(n * p.Tk + j0 + c) * D + d] = convert<T>(dk[c * wq + d]);
        for (int64_t e = 0; e < Dv; ++e) gv[(n * p.Tk + j0 + c) * Dv + e] = convert<T>(dv[c * wv + e]);
      }
    }
    for (int64_t i = 0; i < p.Tq; ++i) {
      const A none = std::numeric_limits<A>::quiet_NaN();  // a row that saw no key, as its output
      for (int64_t d = 0; d < D; ++d)
        gq[(n * p.Tq + i) * D + d] = convert<T>(p.visible(i) > 0 ? dq[i * wq + d] * scale : none);
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
    const int64_t blocks = (p.Tq + kBlock - 1) / kBlock;
#pragma omp parallel if (worth_threads(p))
    {
      ForwardTile<T>& tile = ForwardTile<T>::for_this_thread(p);
      // Causal blocks differ in cost (later rows see more keys), so tasks are handed out as
      // threads free up; each task's result does not depend on which thread runs it.
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < p.batch * blocks; ++task)
        tile.run(p, task / blocks, (task % blocks) * kBlock, static_cast<A>(scale), pq, lq, pk, lk, pv, lv, out,
                 lse);
    }
  });
  return f;
}

namespace {

// One query against n keys and values (rows of D floats): out = softmax(keys query * scale) values,
// with scores as scratch for the n probabilities. A decode step's products are a row at a time, too
// thin for add_product's tiles; with AVX-512 each row is whole vectors (masked at D's end), which
// keeps the dot's sum and the output's accumulators in registers where the plain loops went
// through memory for every key.
void attend(const float* query, const float* keys, const float* values, int64_t n, int64_t D, float scale,
            float* scores, float* out) {
#ifdef __AVX512F__
  for (int64_t j = 0; j < n; ++j) {
    __m512 dot = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += kLanes) {
      const __mmask16 live = first_lanes(D - d);
      dot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, query + d), _mm512_maskz_loadu_ps(live, keys + j * D + d), dot);
    }
    scores[j] = _mm512_reduce_add_ps(dot) * scale;
  }
#else
  for (int64_t j = 0; j < n; ++j) {
    float dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += query[d] * keys[j * D + d];
    scores[j] = dot * scale;
  }
#endif
  const float top = *std::max_element(scores, scores + n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += (scores[j] = fast_exp(scores[j] - top));
#ifdef __AVX512F__
  for (int64_t d = 0; d < D; d += kLanes) {
    const __mmask16 live = first_lanes(D - d);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(scores[j]), _mm512_maskz_loadu_ps(live, values + j * D + d), acc);
    _mm512_mask_storeu_ps(out + d, live, _mm512_div_ps(acc, _mm512_set1_ps(sum)));
  }
#else
  for (int64_t d = 0; d < D; ++d) {
    float acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += scores[j] * values[j * D + d];
    out[d] = acc / sum;
  }
#endif
}

}  // namespace

Tensor decode_attention(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                        const Tensor& v_cache, const std::vector<int64_t>& slots, const std::vector<int64_t>& lengths,
                        double scale) {
  WEFT_CHECK(q.dim() == 4 && q.size(2) == 1 && k_new.shape() == q.shape() && v_new.shape() == q.shape() &&
                 k_cache.dim() == 4 && k_cache.shape() == v_cache.shape() && k_cache.size(1) == q.size(1) &&
                 k_cache.size(3) == q.size(3) && k_cache.is_contiguous() && v_cache.is_contiguous(),
             ShapeError, "decode_attention: expected q, k_new, v_new [B, H, 1, D] and contiguous caches [S, H, capacity, "
             "D], got ", shape_str(q.shape()), " and ", shape_str(k_cache.shape()));
  WEFT_CHECK(q.dtype() == DType::f32 && k_new.dtype() == DType::f32 && v_new.dtype() == DType::f32 &&
                 k_cache.dtype() == DType::f32 && v_cache.dtype() == DType::f32,
             DTypeError, "decode_attention: f32 only");
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), S = k_cache.size(0), capacity = k_cache.size(2);
  WEFT_CHECK(static_cast<int64_t>(slots.size()) == B && static_cast<int64_t>(lengths.size()) == B, ValueError,
             "decode_attention: ", slots.size(), " slots and ", lengths.size(), " lengths for ", B, " sequences");
  std::vector<bool> used(static_cast<size_t>(S), false);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t slot = slots[static_cast<size_t>(b)], length = lengths[static_cast<size_t>(b)];
    WEFT_CHECK(slot >= 0 && slot < S && !used[static_cast<size_t>(slot)], ValueError, "decode_attention: slot ", slot,
               " is out of 0..", S - 1, " or taken twice");
    WEFT_CHECK(length >= 0 && length < capacity, ShapeError, "decode_attention: a sequence of ", length,
               " positions has no room left in a cache of ", capacity);
    used[static_cast<size_t>(slot)] = true;
  }
  Tensor out = Tensor::empty({B, H, 1, D}, DType::f32);
  const float *pq = q.data<float>(), *pk = k_new.data<float>(), *pv = v_new.data<float>();
  float *kc = k_cache.data<float>(), *vc = v_cache.data<float>(), *po = out.data<float>();
  const std::vector<int64_t>&sq = q.strides(), &sk = k_new.strides(), &sv = v_new.strides();
  int64_t work = 0;
  for (int64_t length : lengths) work += (length + 1) * H * D;
  parallel_for(B * H, work >= kParallelGrain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores, query;
    query.resize(static_cast<size_t>(D));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H, length = lengths[static_cast<size_t>(b)];
      float* keys = kc + (slots[static_cast<size_t>(b)] * H + h) * capacity * D;
      float* values = vc + (slots[static_cast<size_t>(b)] * H + h) * capacity * D;
      for (int64_t d = 0; d < D; ++d) {  // the new position into the cache, the query beside
        keys[length * D + d] = pk[b * sk[0] + h * sk[1] + d * sk[3]];
        values[length * D + d] = pv[b * sv[0] + h * sv[1] + d * sv[3]];
        query[static_cast<size_t>(d)] = pq[b * sq[0] + h * sq[1] + d * sq[3]];
      }
      scores.resize(static_cast<size_t>(length + 1));
      attend(query.data(), keys, values, length + 1, D, static_cast<float>(scale), scores.data(), po + task * D);
    }
  });
  return out;
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
