#include "weft/kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <unordered_map>

#include "weft/core/threads.h"
#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu {

namespace {

// The checked description of one call: broadcast batch shape, matrix sizes, dtypes.
struct Problem {
  Shape batch;
  int64_t M = 0, K = 0, N = 0;
  DType in = DType::f32, out = DType::f32;
  Shape out_shape() const {
    Shape s = batch;
    s.push_back(M);
    s.push_back(N);
    return s;
  }
};

Problem check(const Tensor& a, const Tensor& b, const Tensor& bias, std::optional<DType> out_dtype) {
  WEFT_CHECK(a.defined() && b.defined(), ValueError, "matmul: undefined operand");
  WEFT_CHECK(a.dim() >= 2 && b.dim() >= 2, ShapeError, "matmul kernel: expected operands of at least 2 dims, got a ",
             shape_str(a.shape()), " and b ", shape_str(b.shape()));
  WEFT_CHECK(a.dtype() == b.dtype(), DTypeError, "matmul: dtypes differ: a is ", dtype_name(a.dtype()), " ",
             shape_str(a.shape()), ", b is ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
             " (convert one with .to())");
  Problem p;
  p.in = a.dtype();
  p.out = out_dtype.value_or(p.in);
  bool half = p.in == DType::bf16 || p.in == DType::f16;
  WEFT_CHECK(p.in == DType::f32 || p.in == DType::f64 || half, DTypeError,
             "matmul: supports f64, f32, bf16 and f16 operands, got ", dtype_name(p.in));
  WEFT_CHECK(p.out == p.in || (half && p.out == DType::f32), DTypeError, "matmul: ", dtype_name(p.in),
             " operands cannot produce a ", dtype_name(p.out), " result (only the inputs' dtype",
             half ? " or f32)" : ")");
  p.M = a.shape()[a.dim() - 2];
  p.K = a.shape()[a.dim() - 1];
  p.N = b.shape()[b.dim() - 1];
  WEFT_CHECK(b.shape()[b.dim() - 2] == p.K, ShapeError, "matmul: a ", shape_str(a.shape()), " and b ",
             shape_str(b.shape()), " do not chain: a has ", p.K, " columns but b has ", b.shape()[b.dim() - 2],
             " rows");
  int64_t rank = std::max(a.dim(), b.dim()) - 2;
  p.batch.assign(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t da = d - (rank - (a.dim() - 2)), db = d - (rank - (b.dim() - 2));
    int64_t sa = da >= 0 ? a.shape()[da] : 1, sb = db >= 0 ? b.shape()[db] : 1;
    WEFT_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, "matmul: batch dims of a ", shape_str(a.shape()),
               " and b ", shape_str(b.shape()), " do not broadcast (", sa, " vs ", sb, ")");
    p.batch[d] = sa == 1 ? sb : sa;
  }
  if (bias.defined()) {
    WEFT_CHECK(bias.dim() == 1 && bias.shape()[0] == p.N, ShapeError, "matmul: bias ", shape_str(bias.shape()),
               " does not match the result's ", p.N, " columns (a ", shape_str(a.shape()), ", b ",
               shape_str(b.shape()), ")");
    WEFT_CHECK(bias.dtype() == p.in || (half && bias.dtype() == DType::f32), DTypeError, "matmul: bias is ",
               dtype_name(bias.dtype()), " but the operands are ", dtype_name(p.in));
  }
  return p;
}

// t seen with `rank` dims (leading size-1 dims added). A size-1 dim's stride is meaningless to
// weft but not to oneDNN, which takes it at face value (0 there picks its reference kernel), so
// each is set to the extent of the dims inside it, as a dense tensor would have.
Tensor padded(const Tensor& t, int64_t rank) {
  Shape shape(rank, 1), strides(rank, 0);
  int64_t lead = rank - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    shape[lead + d] = t.shape()[d];
    strides[lead + d] = t.strides()[d];
  }
  int64_t extent = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (shape[d] == 1) strides[d] = extent;
    extent = std::max(extent, shape[d] * strides[d]);
  }
  if (shape == t.shape() && strides == t.strides()) return t;
  return t.as_strided(shape, strides, t.storage_offset());
}

// A batch dim that t repeats (stride 0) becomes size 1 when `other` supplies that extent, so
// oneDNN broadcasts it rather than reading the same matrix over and over.
Tensor collapse_repeats(const Tensor& t, const Tensor& other) {
  Shape shape = t.shape();
  for (int64_t d = 0; d + 2 < t.dim(); ++d)
    if (shape[d] > 1 && t.strides()[d] == 0 && other.shape()[d] == shape[d] && other.strides()[d] != 0) shape[d] = 1;
  if (shape == t.shape()) return t;
  return padded(t.as_strided(shape, t.strides(), t.storage_offset()), t.dim());
}

// t [..., R, C] as one [rows, C] matrix when its leading dims lie at even steps in memory.
std::optional<Tensor> try_fold_rows(const Tensor& t) {
  const int64_t cols = t.shape().back(), col_stride = t.strides().back();
  int64_t rows = 1, step = std::max<int64_t>(1, cols * col_stride);
  bool first = true;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.shape()[d] == 1) continue;
    if (first) step = t.strides()[d];
    else if (t.strides()[d] != rows * step) return std::nullopt;
    first = false;
    rows *= t.shape()[d];
  }
  return t.as_strided({rows, cols}, {step, col_stride}, t.storage_offset());
}

bool all_ones(const Shape& shape, size_t count) {
  return std::all_of(shape.begin(), shape.begin() + count, [](int64_t s) { return s == 1; });
}

// Primitives by layout, one cache per thread. oneDNN caches primitives itself, but building the
// primitive descriptor and fetching the primitive from its cache costs about 4 us a call, more
// than a 16^3 GEMM takes; this keeps the primitive together with its memory objects, which each
// call only re-points at its tensors (being per thread, no other call can be using them).
struct Cached {
  dnnl::matmul primitive;
  std::unordered_map<int, dnnl::memory> args;
  bool reference = false;  // oneDNN found no fast kernel for these strides
};

class PrimitiveCache {
 public:
  using Key = std::vector<int64_t>;

  // The entry stays valid until the next get().
  Cached& get(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& dst) {
    Key key{get_num_threads()};
    for (const Tensor* t : {&a, &b, &bias, &dst}) {
      if (!t->defined()) {
        key.push_back(-1);
        continue;
      }
      key.push_back(static_cast<int64_t>(t->dtype()));
      key.push_back(t->dim());
      key.insert(key.end(), t->shape().begin(), t->shape().end());
      key.insert(key.end(), t->strides().begin(), t->strides().end());
    }
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_.splice(entries_.begin(), entries_, found->second);
      return found->second->second;
    }
    dnnl::matmul::desc desc(onednn::desc(a), onednn::desc(b), bias.defined() ? onednn::desc(bias) : dnnl::memory::desc(),
                            onednn::desc(dst));
    dnnl::matmul::primitive_desc pd(desc, onednn::engine());
    Cached made{dnnl::matmul(pd),
                {{DNNL_ARG_SRC, onednn::memory(a)}, {DNNL_ARG_WEIGHTS, onednn::memory(b)}, {DNNL_ARG_DST, onednn::memory(dst)}},
                std::strncmp(pd.impl_info_str(), "ref", 3) == 0};
    if (bias.defined()) made.args.emplace(DNNL_ARG_BIAS, onednn::memory(bias));
    entries_.emplace_front(key, std::move(made));
    index_[key] = entries_.begin();
    if (entries_.size() > kCapacity) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    return entries_.front().second;
  }

 private:
  static constexpr size_t kCapacity = 128;
  struct Hash {
    size_t operator()(const Key& k) const {
      size_t h = 1469598103934665603ull;
      for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
      return h;
    }
  };
  std::list<std::pair<Key, Cached>> entries_;  // most recently used first
  std::unordered_map<Key, std::list<std::pair<Key, Cached>>::iterator, Hash> index_;
};

// dst = a @ b + bias through oneDNN; all four already padded to one rank.
void onednn_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& dst) {
  thread_local PrimitiveCache cache;
  Cached& c = cache.get(a, b, bias, dst);
  if (c.reference && (!a.is_contiguous() || !b.is_contiguous())) {
    onednn_matmul(padded(a.contiguous_untracked(), a.dim()), padded(b.contiguous_untracked(), b.dim()), bias, dst);
    return;
  }
  c.args.at(DNNL_ARG_SRC).set_data_handle(a.data_ptr());
  c.args.at(DNNL_ARG_WEIGHTS).set_data_handle(b.data_ptr());
  c.args.at(DNNL_ARG_DST).set_data_handle(dst.data_ptr());
  if (bias.defined()) c.args.at(DNNL_ARG_BIAS).set_data_handle(bias.data_ptr());
  c.primitive.execute(onednn::stream(), c.args);
  onednn::stream().wait();
}

// dst = a @ b + bias for a few rows of a against b [K, N] whose columns are contiguous (a Linear
// weight [N, K] seen transposed): each output is the dot product of two contiguous rows, so the
// weight is read once, straight through, which is all a batch of one can ask. oneDNN 2.6's GEMM
// repacks such a b into its blocked layout on every call, which at one row costs three times the
// product itself (784x512: 21 us against 7 us on 2 threads); by 8 rows the repacking has paid
// for itself. Weight rows go in blocks of 4 (four sums vectorised along K, the block staying in
// L1 while each row of a passes over it), across threads once the product pays for a parallel
// region. The sums run in another order than oneDNN's, so a row's result differs from the same
// row in a batch of 8 or more by f32 rounding; the vectorised sums are the more accurate ones
// (rms error against f64 at K = 784: 4.1e-6 here, 1.0e-5 from oneDNN's GEMM).
constexpr int64_t kDotMaxRows = 4, kDotBlock = 4, kDotParallelMacs = int64_t{1} << 17;

bool dot_rows_fits(const Tensor& a, const Tensor& b) {
  return a.dtype() == DType::f32 && a.dim() == 2 && b.dim() == 2 && a.shape()[0] <= kDotMaxRows &&
         a.strides()[1] == 1 && b.strides()[0] == 1;
}

void dot_rows(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& dst) {
  const int64_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[1];
  const int64_t lda = a.strides()[0], ldw = b.strides()[1], ldc = dst.strides()[0];
  const float* pa = a.data<float>();
  const float* pw = b.data<float>();
  const float* pbias = bias.defined() ? bias.data<float>() : nullptr;
  const int64_t bias_stride = bias.defined() ? bias.strides().back() : 0;
  float* pc = dst.data<float>();
  auto store = [&](float* c, int64_t n, float sum) { c[n] = pbias ? sum + pbias[n * bias_stride] : sum; };
  auto block_of_rows = [&](int64_t block) {
    const int64_t n0 = block * kDotBlock;
    const float* w0 = pw + n0 * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = pa + m * lda;
      float* c = pc + m * ldc;
      if (n0 + kDotBlock <= N) {
        const float *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t k = 0; k < K; ++k) {
          s0 += w0[k] * x[k];
          s1 += w1[k] * x[k];
          s2 += w2[k] * x[k];
          s3 += w3[k] * x[k];
        }
        store(c, n0, s0);
        store(c, n0 + 1, s1);
        store(c, n0 + 2, s2);
        store(c, n0 + 3, s3);
        continue;
      }
      for (int64_t n = n0; n < N; ++n) {
        const float* w = pw + n * ldw;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += w[k] * x[k];
        store(c, n, s);
      }
    }
  };
  parallel_for((N + kDotBlock - 1) / kDotBlock, M * N * K >= kDotParallelMacs, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) block_of_rows(block);
  });
}

// out = a @ b + bias in f64 for each batch: rows split across threads; within a row block, B is
// walked in [kKc x kNc] tiles that stay in L2 while every row of the block streams over them,
// and the innermost loop runs along a contiguous row of B and C, which the compiler vectorises.
// B rows must be contiguous (stride 1 along N), so other layouts are copied first.
constexpr int64_t kRowBlock = 32, kKc = 128, kNc = 256;

void matmul_f64(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, Tensor& out, const Problem& p) {
  const int64_t rank = out.dim();
  Tensor b = b_in.strides().back() == 1 ? b_in : padded(b_in.contiguous_untracked(), rank);
  const Tensor& a = a_in;
  const int64_t nbatch = numel(p.batch);
  std::vector<int64_t> a_off(nbatch), b_off(nbatch);
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t r = i;
    for (int64_t d = rank - 3; d >= 0; --d) {
      int64_t idx = r % p.batch[d];
      r /= p.batch[d];
      if (a.shape()[d] != 1) a_off[i] += idx * a.strides()[d];
      if (b.shape()[d] != 1) b_off[i] += idx * b.strides()[d];
    }
  }
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  const double* pbias = bias.defined() ? bias.data<double>() : nullptr;
  const int64_t bias_stride = bias.defined() ? bias.strides()[0] : 0;
  double* pc = out.data<double>();
  const int64_t sam = a.strides()[rank - 2], sak = a.strides()[rank - 1], sbk = b.strides()[rank - 2];
  const int64_t M = p.M, K = p.K, N = p.N;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  parallel_for(nbatch * row_blocks, nbatch * M * N * K >= kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t batch = task / row_blocks;
      const int64_t i0 = (task % row_blocks) * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
      const double* A = pa + a_off[batch];
      const double* B = pb + b_off[batch];
      double* C = pc + batch * M * N;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * N + j] = pbias ? pbias[j * bias_stride] : 0.0;
      for (int64_t j0 = 0; j0 < N; j0 += kNc) {
        const int64_t j1 = std::min(N, j0 + kNc);
        for (int64_t k0 = 0; k0 < K; k0 += kKc) {
          const int64_t k1 = std::min(K, k0 + kKc);
          for (int64_t i = i0; i < i1; ++i) {
            double* c = C + i * N;
            for (int64_t k = k0; k < k1; ++k) {
              const double aik = A[i * sam + k * sak];
              const double* brow = B + k * sbk;
#pragma omp simd
              for (int64_t j = j0; j < j1; ++j) c[j] += aik * brow[j];
            }
          }
        }
      }
    }
  });
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, std::optional<DType> out_dtype) {
  Problem p = check(a_in, b_in, bias, out_dtype);
  Tensor out = Tensor::empty(p.out_shape(), p.out);
  if (out.numel() == 0) return out;
  if (p.K == 0) {  // an empty sum: the bias alone
    out.fill_(0);
    if (bias.defined()) out.copy_(bias);
    return out;
  }
  if (p.in != DType::f64 && !onednn::computes_in(p.in)) {
    auto widen = [](const Tensor& t) { return t.defined() ? Tensor::empty(t.shape(), DType::f32).copy_(t) : t; };
    Tensor r = matmul(widen(a_in), widen(b_in), widen(bias), DType::f32);
    return p.out == DType::f32 ? r : out.copy_(r);
  }
  const int64_t rank = out.dim();
  Tensor a = padded(a_in, rank), b = padded(b_in, rank);
  if (p.in == DType::f64) {
    matmul_f64(a, b, bias, out, p);
    return out;
  }
  // oneDNN 2.6 reads the bias as dense whatever its stride (a bias sliced with a step came out
  // wrong): a strided one is copied, N elements.
  const Tensor dense_bias = bias.defined() && bias.strides()[0] != 1 ? bias.contiguous_untracked() : bias;
  Tensor a2 = collapse_repeats(a, b), b2 = collapse_repeats(b, a);
  if (rank > 2 && all_ones(b2.shape(), rank - 2)) {
    if (std::optional<Tensor> rows = try_fold_rows(a2)) {
      Tensor b_matrix = b2.as_strided({p.K, p.N}, {b2.strides()[rank - 2], b2.strides()[rank - 1]}, b2.storage_offset());
      Tensor dst = out.as_strided({rows->shape()[0], p.N}, {p.N, 1}, 0);
      if (dot_rows_fits(*rows, b_matrix)) dot_rows(*rows, b_matrix, bias, dst);
      else onednn_matmul(*rows, b_matrix, dense_bias.defined() ? padded(dense_bias, 2) : dense_bias, dst);
      return out;
    }
  }
  if (rank == 2 && dot_rows_fits(a2, b2)) dot_rows(a2, b2, bias, out);
  else onednn_matmul(a2, b2, dense_bias.defined() ? padded(dense_bias, rank) : dense_bias, out);
  return out;
}

Tensor fold_rows(const Tensor& t) {
  WEFT_CHECK(t.dim() >= 1, ShapeError, "fold_rows: expected at least 1 dim, got ", shape_str(t.shape()));
  if (std::optional<Tensor> rows = try_fold_rows(t)) return *rows;
  return *try_fold_rows(t.contiguous_untracked());
}

namespace reference {

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, std::optional<DType> out_dtype) {
  Problem p = check(a, b, bias, out_dtype);
  Shape a_shape = p.batch, b_shape = p.batch;
  a_shape.insert(a_shape.end(), {p.M, p.K});
  b_shape.insert(b_shape.end(), {p.K, p.N});
  Tensor a64 = Tensor::empty(a_shape, DType::f64).copy_(a);
  Tensor b64 = Tensor::empty(b_shape, DType::f64).copy_(b);
  std::vector<double> bias64 = bias.defined() ? bias.to_vector<double>() : std::vector<double>(p.N, 0.0);
  Tensor out = Tensor::empty(p.out_shape(), DType::f64);
  const double* A = a64.data<double>();
  const double* B = b64.data<double>();
  double* C = out.data<double>();
  for (int64_t batch = 0; batch < numel(p.batch); ++batch)
    for (int64_t i = 0; i < p.M; ++i)
      for (int64_t j = 0; j < p.N; ++j) {
        double acc = bias64[j];
        for (int64_t k = 0; k < p.K; ++k) acc += A[(batch * p.M + i) * p.K + k] * B[(batch * p.K + k) * p.N + j];
        C[(batch * p.M + i) * p.N + j] = acc;
      }
  return Tensor::empty(out.shape(), p.out).copy_(out);
}

}  // namespace reference

}  // namespace weft::cpu
