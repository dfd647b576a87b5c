#include "weft/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "weft/autograd/grad_mode.h"
#include "weft/core/convert.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/monitor/profiler.h"
#include "weft/optim/simd.h"

namespace weft::optim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A chunk's sum is its own (so the total does not depend on how chunks are dealt to threads),
// over kLanes running sums: element j of a chunk goes to lane j % kLanes, which is what four
// AVX-512 f64 accumulators hold.
constexpr int64_t kChunk = 16384;
constexpr int64_t kLanes = 32;

// Up to kChunk elements of one grad.
struct Chunk {
  const Tensor* grad;
  int64_t begin, end;
};

std::vector<Chunk> chunks_of(const std::vector<Tensor>& grads) {
  std::vector<Chunk> chunks;
  for (const Tensor& g : grads)
    for (int64_t begin = 0; begin < g.numel(); begin += kChunk)
      chunks.push_back({&g, begin, std::min(g.numel(), begin + kChunk)});
  return chunks;
}

#ifdef __AVX512F__
// Adds x[0..32) into the four accumulators, lane j % 32 of the chunk in acc[j / 8] lane j % 8.
inline void add_squares(const float* x, __m512d acc[4]) {
  for (int k = 0; k < 4; ++k) {
    const __m512d part = _mm512_cvtps_pd(_mm256_loadu_ps(x + 8 * k));
    acc[k] = _mm512_fmadd_pd(part, part, acc[k]);
  }
}
inline void add_squares(const double* x, __m512d acc[4]) {
  for (int k = 0; k < 4; ++k) {
    const __m512d part = _mm512_loadu_pd(x + 8 * k);
    acc[k] = _mm512_fmadd_pd(part, part, acc[k]);
  }
}
#endif

// sum |x|^p over x[0..n) (p finite) in the lane order above, in f64. The scalar loop is the
// reference; the AVX-512 loop (p = 2, f32 and f64) gives the same lanes bit for bit.
template <typename T>
double power_sum(const T* x, int64_t n, double p) {
  double lanes[kLanes] = {};
  int64_t j = 0;
  auto value = [x](int64_t i) { return std::abs(static_cast<double>(static_cast<compute_type<T>>(x[i]))); };
  if (p != 2) {
    for (; j < n; ++j) lanes[j % kLanes] += std::pow(value(j), p);
  } else {
#ifdef __AVX512F__
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
      for (; j + kLanes <= n; j += kLanes) add_squares(x + j, acc);
      for (int k = 0; k < 4; ++k) _mm512_storeu_pd(lanes + 8 * k, acc[k]);
    }
#endif
    for (; j < n; ++j) {
      const double a = value(j);
      lanes[j % kLanes] = mul_add(a, a, lanes[j % kLanes]);
    }
  }
  double sum = 0;
  for (double lane : lanes) sum += lane;
  return sum;
}

// max |x| over x[0..n), NaN if any element is NaN.
template <typename T>
double max_abs(const T* x, int64_t n) {
  double top = 0;
  bool any_nan = false;
  for (int64_t j = 0; j < n; ++j) {
    const double a = std::abs(static_cast<double>(static_cast<compute_type<T>>(x[j])));
    any_nan = any_nan || std::isnan(a);
    top = std::max(top, a);
  }
  return any_nan ? kNaN : top;
}

// Each chunk's share of the norm of `grads` (contiguous), in chunk order.
std::vector<double> chunk_shares(const std::vector<Tensor>& grads, double norm_type) {
  const std::vector<Chunk> chunks = chunks_of(grads);
  std::vector<double> partial(chunks.size());
  int64_t total = 0;
  for (const Tensor& g : grads) total += g.numel();
  const bool max_norm = std::isinf(norm_type);
#pragma omp parallel for schedule(static) if (total >= kParallelGrain)
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    partial[c] = visit_dtype(ch.grad->dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(ch.grad->data_ptr()) + ch.begin;
      return max_norm ? max_abs(x, ch.end - ch.begin) : power_sum(x, ch.end - ch.begin, norm_type);
    });
  }
  return partial;
}

// The norm from the chunks' shares, added in order.
double combine_shares(const std::vector<double>& partial, double norm_type) {
  const bool max_norm = std::isinf(norm_type);
  double sum = 0;
  for (double part : partial) sum = max_norm ? (std::isnan(part) || std::isnan(sum) ? kNaN : std::max(sum, part)) : sum + part;
  if (max_norm) return sum;
  return norm_type == 2 ? std::sqrt(sum) : std::pow(sum, 1 / norm_type);
}

// The norm of `grads` (contiguous), as grad_norm says.
double total_norm(const std::vector<Tensor>& grads, double norm_type) {
  return combine_shares(chunk_shares(grads, norm_type), norm_type);
}

void check_norm_type(double norm_type) {
  WEFT_CHECK(norm_type > 0, ValueError, "clip_grad_norm: norm_type must be > 0 or INFINITY, got ", norm_type);
}

// The defined grads of `params`, contiguous (a strided grad's copy).
std::vector<Tensor> contiguous_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad().contiguous_untracked());
  return grads;
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  check_norm_type(norm_type);
  const std::vector<Tensor> grads = contiguous_grads(params);
  if (grads.empty()) return 0;
  monitor::OpScope scope(Op::grad_norm, grads);
  const double total = total_norm(grads, norm_type);
  if (scope.active()) {  // |x|^p and a sum per element, read once
    double n = 0;
    for (const Tensor& g : grads) n += static_cast<double>(g.numel());
    scope.set_cost(2.0 * n, monitor::bytes_of(grads));
  }
  return total;
}

double tensors_norm(const std::vector<Tensor>& tensors, double norm_type) {
  check_norm_type(norm_type);
  std::vector<Tensor> values;
  for (const Tensor& t : tensors) values.push_back(t.contiguous_untracked());
  return values.empty() ? 0 : total_norm(values, norm_type);
}

BackwardGradNorm::BackwardGradNorm(const std::vector<Tensor>& params, double norm_type)
    : params_(params), norm_type_(norm_type), shares_(params.size()) {
  check_norm_type(norm_type);
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].defined())
      hooks_.push_back(params_[i].register_grad_ready_hook([this, i](const Tensor& leaf) {
        if (!armed_ || !leaf.grad().defined()) return;
        const Tensor grad = leaf.grad().contiguous_untracked();
        monitor::OpScope scope(Op::grad_norm, {grad});
        shares_[i] = chunk_shares({grad}, norm_type_);
        if (scope.active()) scope.set_cost(2.0 * static_cast<double>(grad.numel()), monitor::bytes_of({grad}));
      }));
}

BackwardGradNorm::~BackwardGradNorm() {
  for (RemovableHandle& hook : hooks_) hook.remove();
}

void BackwardGradNorm::arm() {
  for (std::optional<std::vector<double>>& share : shares_) share.reset();
  armed_ = true;
}

double BackwardGradNorm::norm() {
  armed_ = false;
  std::vector<double> partial;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined() || !p.grad().defined()) continue;
    if (!shares_[i]) shares_[i] = chunk_shares({p.grad().contiguous_untracked()}, norm_type_);
    partial.insert(partial.end(), shares_[i]->begin(), shares_[i]->end());
  }
  return combine_shares(partial, norm_type_);
}

double clip_coefficient(double total_norm, double max_norm) {
  WEFT_CHECK(max_norm >= 0, ValueError, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  const double coef = max_norm / (total_norm + 1e-6);
  return coef >= 1 ? 1 : coef;  // a NaN factor scales too, as in PyTorch
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  WEFT_CHECK(max_norm >= 0, ValueError, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  check_norm_type(norm_type);
  const std::vector<Tensor> grads = contiguous_grads(params);
  if (grads.empty()) return 0;
  monitor::OpScope scope(Op::clip_grad_norm, grads);
  const double total = total_norm(grads, norm_type);
  const double coef = clip_coefficient(total, max_norm);
  const bool scaled = coef != 1;
  if (scaled) {
    NoGradGuard no_grad;
    // Contiguous f32 and f64 grads in one parallel pass, g * coef in the grad's dtype as the
    // elementwise mul computes it; the others (a strided grad, scaled through the caller's view;
    // a 16-bit one) through that mul.
    std::vector<Tensor> fast;
    for (const Tensor& p : params) {
      if (!p.defined() || !p.grad().defined()) continue;
      Tensor g = p.grad();
      if (g.is_contiguous() && (g.dtype() == DType::f32 || g.dtype() == DType::f64)) fast.push_back(g);
      else cpu::binary_(cpu::Binary::mul, g, Tensor::scalar(coef, g.dtype()));
    }
    const std::vector<Chunk> chunks = chunks_of(fast);
#pragma omp parallel for schedule(static) if (chunks.size() > 1)
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& ch = chunks[c];
      auto scale = [&](auto* x) {
        using T = std::remove_reference_t<decltype(*x)>;
        const T factor = static_cast<T>(coef);
        for (int64_t j = ch.begin; j < ch.end; ++j) x[j] *= factor;
      };
      if (ch.grad->dtype() == DType::f64) scale(static_cast<double*>(ch.grad->data_ptr()));
      else scale(static_cast<float*>(ch.grad->data_ptr()));
    }
  }
  if (scope.active()) {  // |x|^p and a sum per element, read once; scaling reads and writes once more
    double n = 0;
    for (const Tensor& g : grads) n += static_cast<double>(g.numel());
    scope.set_cost((2.0 + scaled) * n, (1.0 + 2.0 * scaled) * monitor::bytes_of(grads));
  }
  return total;
}

}  // namespace weft::optim
