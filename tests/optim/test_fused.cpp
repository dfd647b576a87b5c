// The fused optimizer pass and clipping's norm against their per-element formulas, bit for bit:
// many parameters of sizes that do not divide the vector width (1-element ones among them), some
// without grads at some steps, several steps, several thread counts. The formulas are the
// per-parameter loops' that the fused pass replaced, with their fused multiply-adds written out as
// GCC contracted them (optim/simd.h); this file is built with -ffp-contract=off, as the pass is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/sgd.h"
#include "weft/optim/simd.h"

namespace weft::optim {
namespace {

const std::vector<int64_t> kSizes = {1, 3, 15, 16, 17, 31, 33, 100, 1000, 1, 40000, 7, 65537, 2};
constexpr int kSteps = 4;
const double kLrs[kSteps] = {0.01, 0.02, 0.005, 0.013};
const double kFactors[kSteps] = {1, 0.37, 1, 0.81};  // the grad factor (clipping's) per step

// Parameter k has no grad at step s when this holds: some skip their first step, some a later one.
bool skipped(size_t k, int s) { return (k + static_cast<size_t>(s)) % 5 == 0; }

// The reference state of one parameter, in its dtype.
template <typename T>
struct Ref {
  std::vector<T> p, m, v;
  int64_t step = 0;
};

// torch.optim.Adam / AdamW, per element.
template <typename T>
void adam_ref(Ref<T>& r, const std::vector<T>& grad, double lr, double factor, const AdamOptions& o) {
  const int64_t t = ++r.step;
  const bool decoupled = o.decoupled_weight_decay;
  const T decay = static_cast<T>(decoupled ? mul_add(-lr, o.weight_decay, 1.0) : 1.0);
  const T l2 = static_cast<T>(decoupled ? 0 : o.weight_decay);
  const T step_size = static_cast<T>(-(lr / (1 - std::pow(o.beta1, static_cast<double>(t)))));
  const T bc2 = static_cast<T>(std::sqrt(1 - std::pow(o.beta2, static_cast<double>(t))));
  if (t == 1) r.m = r.v = std::vector<T>(r.p.size(), 0);
  for (size_t j = 0; j < r.p.size(); ++j) {
    T g = factor == 1 ? grad[j] : grad[j] * static_cast<T>(factor);
    if (l2 != 0) g = mul_add(l2, r.p[j], g);
    const T param = decay != 1 ? r.p[j] * decay : r.p[j];
    r.m[j] = mul_add(static_cast<T>(o.beta1), r.m[j], static_cast<T>(1 - o.beta1) * g);
    r.v[j] = mul_add(static_cast<T>(o.beta2), r.v[j], static_cast<T>(1 - o.beta2) * g * g);
    r.p[j] = param + step_size * r.m[j] / (std::sqrt(r.v[j]) / bc2 + static_cast<T>(o.eps));
  }
}

// torch.optim.SGD, per element (m is the momentum buffer).
template <typename T>
void sgd_ref(Ref<T>& r, const std::vector<T>& grad, double lr, double factor, const SGDOptions& o) {
  const bool first = ++r.step == 1;
  if (first) r.m = std::vector<T>(r.p.size(), 0);
  for (size_t j = 0; j < r.p.size(); ++j) {
    T d = factor == 1 ? grad[j] : grad[j] * static_cast<T>(factor);
    if (o.weight_decay != 0) d = mul_add(static_cast<T>(o.weight_decay), r.p[j], d);
    if (o.momentum != 0) {
      r.m[j] = first ? d : mul_add(static_cast<T>(o.momentum), r.m[j], static_cast<T>(1 - o.dampening) * d);
      d = o.nesterov ? mul_add(static_cast<T>(o.momentum), r.m[j], d) : r.m[j];
    }
    r.p[j] = mul_add(static_cast<T>(-lr), d, r.p[j]);
  }
}

struct Rule {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make;
  std::function<void(Ref<float>&, const std::vector<float>&, double, double)> ref_f32;
  std::function<void(Ref<double>&, const std::vector<double>&, double, double)> ref_f64;
};

template <typename Options>
Rule rule(std::string name, Options options) {
  auto ref = [options](auto& r, const auto& g, double lr, double factor) {
    if constexpr (std::is_same_v<Options, AdamOptions>) adam_ref(r, g, lr, factor, options);
    else sgd_ref(r, g, lr, factor, options);
  };
  return {name,
          [options](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> {
            if constexpr (std::is_same_v<Options, AdamOptions>) return std::make_unique<Adam>(params, options);
            else return std::make_unique<SGD>(params, 1.0, options);
          },
          ref, ref};
}

std::vector<Rule> rules() {
  return {rule("AdamW", AdamOptions{.weight_decay = 0.1, .decoupled_weight_decay = true}),
          rule("Adam L2", AdamOptions{.beta1 = 0.8, .beta2 = 0.95, .weight_decay = 0.01}),
          rule("Adam", AdamOptions{.eps = 1e-6}),
          rule("SGD", SGDOptions{}),
          rule("SGD momentum", SGDOptions{.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}),
          rule("SGD Nesterov", SGDOptions{.momentum = 0.9, .nesterov = true})};
}

template <typename T>
void expect_same_bits(const std::vector<T>& expected, const Tensor& actual, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(expected.size()), actual.numel()) << what;
  const T* a = actual.data<T>();
  if (std::memcmp(expected.data(), a, expected.size() * sizeof(T)) == 0) return;
  for (size_t j = 0; j < expected.size(); ++j)
    ASSERT_EQ(std::memcmp(&expected[j], &a[j], sizeof(T)), 0)
        << what << " element " << j << ": expected " << expected[j] << ", got " << a[j];
}

template <typename T>
void expect_fused_matches_formula(const Rule& rule, int threads) {
  const DType dtype = dtype_of<T>();
  Generator gen(1234);
  std::vector<Tensor> params;
  std::vector<Ref<T>> refs;
  for (int64_t n : kSizes) {
    params.push_back(Tensor::randn({n}, gen, dtype).requires_grad_(true));
    refs.push_back({params.back().template to_vector<T>(), {}, {}, 0});
  }
  std::unique_ptr<Optimizer> opt = rule.make(params);
  for (int s = 0; s < kSteps; ++s) {
    opt->set_lr(kLrs[s]);
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = Tensor::randn({kSizes[k]}, gen, dtype);
      params[k].set_grad(skipped(k, s) ? Tensor() : g);
      if (skipped(k, s)) continue;
      if constexpr (std::is_same_v<T, float>) rule.ref_f32(refs[k], g.to_vector<float>(), kLrs[s], kFactors[s]);
      else rule.ref_f64(refs[k], g.to_vector<double>(), kLrs[s], kFactors[s]);
    }
    set_num_threads(threads);
    opt->step(kFactors[s]);
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string what = str(rule.name, " ", dtype_name(dtype), " ", threads, " threads, step ", s,
                                   ", parameter ", k, " [", kSizes[k], "]");
      ASSERT_EQ(opt->step_count(k), refs[k].step) << what;
      expect_same_bits(refs[k].p, params[k], what + " value");
      const NamedTensors state = opt->state(k);
      const bool stateless = rule.name == "SGD";  // plain SGD keeps no buffers
      ASSERT_EQ(state.empty(), refs[k].step == 0 || stateless) << what;
      if (state.empty()) continue;
      expect_same_bits(refs[k].m, state[0].second, what + " " + state[0].first);
      if (state.size() > 1) expect_same_bits(refs[k].v, state[1].second, what + " " + state[1].first);
    }
  }
}

class FusedStep : public ::testing::TestWithParam<int> {
 protected:
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = get_num_threads();
};

TEST_P(FusedStep, F32MatchesTheFormulaBitForBit) {
  for (const Rule& r : rules()) expect_fused_matches_formula<float>(r, GetParam());
}

TEST_P(FusedStep, F64MatchesTheFormulaBitForBit) {
  for (const Rule& r : rules()) expect_fused_matches_formula<double>(r, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Threads, FusedStep, ::testing::Values(1, 2, 3));

// The trainer's path, grad_norm then step(clip_coefficient), against clip_grad_norm then step().
TEST(FusedStep, GradFactorIsClipGradNormInPlace) {
  for (const double max_norm : {0.5, 1e9}) {
    Generator gen(7);
    std::vector<Tensor> a, b;
    for (int64_t n : kSizes) {
      a.push_back(Tensor::randn({n}, gen).requires_grad_(true));
      b.push_back(a.back().detach().clone().requires_grad_(true));
    }
    AdamW folded(a, {.weight_decay = 0.1}), in_place(b, {.weight_decay = 0.1});
    for (int s = 0; s < 3; ++s) {
      for (size_t k = 0; k < a.size(); ++k) {
        Tensor g = Tensor::randn({kSizes[k]}, gen);
        a[k].set_grad(g.clone());
        b[k].set_grad(g);
      }
      const double norm = grad_norm(a);
      folded.step(clip_coefficient(norm, max_norm));
      EXPECT_EQ(clip_grad_norm(b, max_norm), norm);
      in_place.step();
      for (size_t k = 0; k < a.size(); ++k)
        expect_same_bits(b[k].to_vector<float>(), a[k], str("max_norm ", max_norm, " step ", s, " parameter ", k));
    }
  }
}

// The documented order: chunks of 16384 elements of each grad, 32 lanes per chunk (element j in
// lane j % 32, squares added with one rounding), the lanes summed in order, then the chunks.
double norm_in_documented_order(const std::vector<Tensor>& params) {
  double total = 0;
  for (const Tensor& p : params) {
    const std::vector<float> g = p.grad().to_vector<float>();
    for (size_t begin = 0; begin < g.size(); begin += 16384) {
      double lanes[32] = {};
      for (size_t j = begin; j < std::min(g.size(), begin + 16384); ++j) {
        const double x = g[j];
        lanes[(j - begin) % 32] = mul_add(x, x, lanes[(j - begin) % 32]);
      }
      double chunk = 0;
      for (double lane : lanes) chunk += lane;
      total += chunk;
    }
  }
  return std::sqrt(total);
}

TEST(FusedGradNorm, SameBitsForEveryThreadCountInTheDocumentedOrder) {
  const int saved = get_num_threads();
  Generator gen(99);
  std::vector<Tensor> params;
  for (int64_t n : kSizes) {
    params.push_back(Tensor::zeros({n}).requires_grad_(true));
    params.back().set_grad(Tensor::randn({n}, gen));
  }
  const double expected = norm_in_documented_order(params);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(grad_norm(params), expected) << threads << " threads";
  }
  set_num_threads(saved);
}

// The 16-bit copies an optimizer keeps are, after every step, bit for bit the parameters cast to
// their dtype: parameters without a grad that step included (their copies must stay as they were),
// and parameters longer than the block the pass converts at a time, across threads.
TEST(LowPrecisionCopies, EqualTheParametersCastAfterEveryStep) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int which = 0; which < 2; ++which) {
      Generator gen(5);
      std::vector<Tensor> params;
      for (int64_t n : kSizes) params.push_back(Tensor::randn({n}, gen));
      std::unique_ptr<Optimizer> opt;
      if (which == 0) opt = std::make_unique<AdamW>(params, AdamWOptions{.lr = 0.05});
      else opt = std::make_unique<SGD>(params, 0.1, SGDOptions{.momentum = 0.9});
      opt->keep_low_precision_copies(dtype);
      ASSERT_EQ(opt->low_precision_copies().size(), params.size());
      for (int s = 0; s < kSteps; ++s) {
        for (size_t k = 0; k < params.size(); ++k)
          params[k].set_grad(skipped(k, s) ? Tensor() : Tensor::randn(params[k].shape(), gen));
        opt->step(kFactors[s]);
        for (size_t k = 0; k < params.size(); ++k) {
          const Tensor& copy = opt->low_precision_copies()[k];
          const Tensor cast = params[k].to(dtype);
          ASSERT_EQ(copy.dtype(), dtype);
          ASSERT_EQ(std::memcmp(copy.data_ptr(), cast.data_ptr(), cast.nbytes()), 0)
              << opt->name() << " " << dtype_name(dtype) << " step " << s << " parameter " << k;
        }
      }
    }
  }
}

// Master weights: the model's 16-bit parameters and grads, f32 masters in the optimizer. Each step
// is bit for bit the f32 step of the masters on the grads widened to f32, and each model parameter
// is its master rounded; the state carries the masters, so a fresh optimizer loaded from it goes
// on with the same bits.
TEST(MasterWeights, StepTheMastersOnWidenedGradsAndRoundThemIntoTheModel) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int which = 0; which < 2; ++which) {
      auto make = [&](std::vector<Tensor> masters) -> std::unique_ptr<Optimizer> {
        if (which == 0) return std::make_unique<AdamW>(std::move(masters), AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
        return std::make_unique<SGD>(std::move(masters), 0.1, SGDOptions{.momentum = 0.9});
      };
      Generator gen(9);
      std::vector<Tensor> masters, model, reference;
      for (int64_t n : kSizes) {
        masters.push_back(Tensor::randn({n}, gen));
        reference.push_back(masters.back().clone());
        model.push_back(Tensor::empty({n}, dtype).requires_grad_(true));
      }
      std::unique_ptr<Optimizer> opt = make(masters), ref = make(reference);
      opt->keep_masters_of(model);
      for (size_t k = 0; k < model.size(); ++k)
        ASSERT_EQ(std::memcmp(model[k].data_ptr(), masters[k].to(dtype).data_ptr(), model[k].nbytes()), 0);
      const std::string what = str(opt->name(), " ", dtype_name(dtype));
      auto step = [&](Optimizer& o, Optimizer& r, std::vector<Tensor>& params, int s) {
        for (size_t k = 0; k < params.size(); ++k) {
          const Tensor g = skipped(k, s) ? Tensor() : Tensor::randn(params[k].shape(), gen).to(dtype);
          params[k].set_grad(g);
          reference[k].set_grad(g.defined() ? g.to(DType::f32) : Tensor());
        }
        o.step(kFactors[s]);
        r.step(kFactors[s]);
        for (size_t k = 0; k < params.size(); ++k) {
          const Tensor& master = o.params()[k];
          ASSERT_EQ(std::memcmp(master.data_ptr(), reference[k].data_ptr(), master.nbytes()), 0) << what << " step " << s << " master " << k;
          ASSERT_EQ(std::memcmp(params[k].data_ptr(), master.to(dtype).data_ptr(), params[k].nbytes()), 0)
              << what << " step " << s << " parameter " << k;
        }
      };
      for (int s = 0; s < 2; ++s) step(*opt, *ref, model, s);
      opt->zero_grad();
      for (const Tensor& p : model) EXPECT_FALSE(p.grad().defined()) << what;

      const auto state = opt->state_dict();
      ASSERT_TRUE(state.count("1.master")) << what;
      std::vector<Tensor> fresh_masters, fresh_model;
      for (int64_t n : kSizes) {
        fresh_masters.push_back(Tensor::zeros({n}));
        fresh_model.push_back(Tensor::zeros({n}, dtype).requires_grad_(true));
      }
      std::unique_ptr<Optimizer> resumed = make(fresh_masters);
      resumed->keep_masters_of(fresh_model);
      resumed->load_state_dict(state);
      for (int s = 2; s < kSteps; ++s) step(*resumed, *ref, fresh_model, s);
    }
  }
}

TEST(MasterWeights, RefusesModelParametersThatDoNotFit) {
  std::vector<Tensor> masters = {Tensor::zeros({4}), Tensor::zeros({3})};
  AdamW opt(masters, AdamWOptions{});
  EXPECT_THROW(opt.keep_masters_of({Tensor::zeros({4}, DType::bf16)}), ValueError);
  EXPECT_THROW(opt.keep_masters_of({Tensor::zeros({4}, DType::bf16), Tensor::zeros({3})}), ValueError);
  EXPECT_THROW(opt.keep_masters_of({Tensor::zeros({4}, DType::bf16), Tensor::zeros({4}, DType::bf16)}), ValueError);
  std::vector<Tensor> doubles = {Tensor::zeros({2}, DType::f64)};
  AdamW f64(doubles, AdamWOptions{});
  EXPECT_THROW(f64.keep_masters_of({Tensor::zeros({2}, DType::bf16)}), DTypeError);
}

}  // namespace
}  // namespace weft::optim
