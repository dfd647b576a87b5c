#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <string>

#include "optim/golden/optim_golden.h"
#include "weft/core/threads.h"
#include "weft/core/random.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/schedule.h"
#include "weft/optim/sgd.h"

namespace weft::optim {
namespace {

namespace g = golden;

// Splits golden's flat values into tensors of g::kShapes.
std::vector<Tensor> split(const double* flat, DType dtype) {
  std::vector<Tensor> out;
  for (const auto& shape : g::kShapes) {
    int64_t n = numel(shape);
    out.push_back(Tensor::from_vector(std::vector<double>(flat, flat + n), shape, dtype));
    flat += n;
  }
  return out;
}

std::vector<Tensor> golden_params(DType dtype) {
  std::vector<Tensor> params = split(g::kInit, dtype);
  for (Tensor& p : params) p.requires_grad_(true);
  return params;
}

// Gives each parameter golden step s's gradient, or none where golden has none.
void set_golden_grads(const std::vector<Tensor>& params, int s) {
  std::vector<Tensor> grads = split(g::kGrads[s], params[0].dtype());
  for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(g::kHasGrad[s][i] ? grads[i] : Tensor());
}

std::vector<double> flatten(const std::vector<Tensor>& tensors) {
  std::vector<double> out;
  for (const Tensor& t : tensors)
    for (double v : t.to_vector<double>()) out.push_back(v);
  return out;
}

std::vector<double> flat_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return flatten(grads);
}

std::unique_ptr<Optimizer> make_optimizer(const g::Case& c, std::vector<Tensor> params) {
  std::string kind = c.kind;
  if (kind == "sgd")
    return std::make_unique<SGD>(params, c.lrs[0], SGDOptions{.momentum = c.momentum, .dampening = c.dampening,
                                                             .weight_decay = c.weight_decay, .nesterov = c.nesterov});
  if (kind == "adam")
    return std::make_unique<Adam>(params, AdamOptions{.lr = c.lrs[0], .beta1 = c.beta1, .beta2 = c.beta2,
                                                      .eps = c.eps, .weight_decay = c.weight_decay});
  return std::make_unique<AdamW>(params, AdamWOptions{.lr = c.lrs[0], .beta1 = c.beta1, .beta2 = c.beta2,
                                                      .eps = c.eps, .weight_decay = c.weight_decay});
}

// |actual - expected| <= tol * max(1, |expected|), elementwise.
void expect_close(const std::vector<double>& actual, const double* expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.size(), static_cast<size_t>(g::kNumel)) << what;
  for (size_t k = 0; k < actual.size(); ++k)
    EXPECT_NEAR(actual[k], expected[k], tol * std::max(1.0, std::abs(expected[k]))) << what << ", element " << k;
}

void expect_matches_torch(DType dtype, double tol) {
  for (const g::Case& c : g::kCases) {
    std::vector<Tensor> params = golden_params(dtype);
    auto opt = make_optimizer(c, params);
    for (int s = 0; s < g::kSteps; ++s) {
      opt->set_lr(c.lrs[s]);
      set_golden_grads(params, s);
      opt->step();
      expect_close(flatten(params), c.expected[s], tol, str(c.name, " ", dtype_name(dtype), " step ", s));
    }
  }
}

TEST(OptimGolden, F64MatchesTorch) { expect_matches_torch(DType::f64, 1e-12); }

TEST(OptimGolden, F32MatchesTorchLoosely) { expect_matches_torch(DType::f32, 1e-5); }

TEST(OptimGolden, StepCountsArePerParameter) {
  std::vector<Tensor> params = golden_params(DType::f64);
  Adam opt(params);
  for (int s = 0; s < g::kSteps; ++s) {
    set_golden_grads(params, s);
    opt.step();
  }
  EXPECT_EQ(opt.step_count(0), 5);
  EXPECT_EQ(opt.step_count(1), 4);  // no grad at step 2
  EXPECT_EQ(opt.step_count(2), 4);  // no grad at step 0
}

TEST(OptimStep, SkipsParametersWithoutGrad) {
  Tensor a = Tensor::full({2}, 1.0, DType::f64).requires_grad_(true);
  Tensor b = Tensor::full({2}, 1.0, DType::f64).requires_grad_(true);
  a.set_grad(Tensor::full({2}, 0.5, DType::f64));
  SGD opt({a, b}, 0.1, {.momentum = 0.9});
  opt.step();
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{0.95, 0.95}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(opt.step_count(1), 0);
  EXPECT_TRUE(opt.state(1).empty());
}

TEST(OptimStep, SetLrAffectsTheNextStep) {
  Tensor p = Tensor::full({3}, 1.0, DType::f64).requires_grad_(true);
  SGD opt({p}, 0.1);
  p.set_grad(Tensor::full({3}, 0.5, DType::f64));
  opt.step();
  EXPECT_DOUBLE_EQ(p.at({0}), 0.95);
  opt.set_lr(0.2);
  EXPECT_EQ(opt.lr(), 0.2);
  opt.step();
  EXPECT_DOUBLE_EQ(p.at({0}), 0.85);
}

TEST(OptimStep, NonContiguousGradient) {
  Tensor base = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor grad = base.t();  // shape [3, 2], strided
  ASSERT_FALSE(grad.is_contiguous());
  Tensor p = Tensor::zeros({3, 2}, DType::f64).requires_grad_(true);
  p.set_grad(grad);
  SGD opt({p}, 1.0);
  opt.step();
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{-1, -4, -2, -5, -3, -6}));
}

// Large enough for the threaded loop: every element must still get the exact first Adam step,
// p - lr * g / (|g| + eps) up to rounding.
TEST(OptimStep, LargeParameterUsesEveryElement) {
  const int64_t n = 2 * kParallelGrain + 3;
  std::vector<double> values(n), grads(n);
  for (int64_t j = 0; j < n; ++j) {
    values[j] = std::sin(0.01 * static_cast<double>(j));
    grads[j] = std::cos(0.013 * static_cast<double>(j)) + 1.5;
  }
  Tensor p = Tensor::from_vector(values, {n}, DType::f64).requires_grad_(true);
  p.set_grad(Tensor::from_vector(grads, {n}, DType::f64));
  Adam opt({p}, {.lr = 0.01});
  opt.step();
  std::vector<double> out = p.to_vector<double>();
  for (int64_t j = 0; j < n; ++j)
    ASSERT_NEAR(out[j], values[j] - 0.01 * grads[j] / (grads[j] + 1e-8), 1e-12) << "element " << j;
}

TEST(OptimZeroGrad, SetToNoneOrZero) {
  Tensor a = Tensor::ones({2, 2}).requires_grad_(true);
  Tensor b = Tensor::ones({3}).requires_grad_(true);
  SGD opt({a, b}, 0.1);
  Tensor ga = Tensor::full({2, 2}, 3.0);
  a.set_grad(ga);
  opt.zero_grad(false);
  EXPECT_TRUE(a.grad().is_same(ga));  // zeroed in place, not replaced
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_FALSE(b.grad().defined());  // stays undefined
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(OptimState, ExposesNamedBuffers) {
  Tensor p = Tensor::full({2}, 1.0, DType::f64).requires_grad_(true);
  Tensor grad = Tensor::from_vector(std::vector<double>{0.5, -2.0}, {2});
  SGD plain({p}, 0.1);
  SGD momentum({p}, 0.1, {.momentum = 0.9});
  Adam adam({p}, {.beta1 = 0.8, .beta2 = 0.9});
  for (Optimizer* opt : std::initializer_list<Optimizer*>{&plain, &momentum, &adam}) {
    EXPECT_TRUE(opt->state(0).empty()) << opt->name();
    p.set_grad(grad);
    opt->step();
    EXPECT_EQ(opt->step_count(0), 1) << opt->name();
  }
  EXPECT_TRUE(plain.state(0).empty());

  NamedTensors s = momentum.state(0);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].first, "momentum_buffer");
  EXPECT_EQ(s[0].second.to_vector<double>(), grad.to_vector<double>());  // first step: buf = grad

  s = adam.state(0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, "exp_avg");
  EXPECT_EQ(s[1].first, "exp_avg_sq");
  EXPECT_NEAR(s[0].second.at({1}), 0.2 * -2.0, 1e-15);
  EXPECT_NEAR(s[1].second.at({1}), 0.1 * 4.0, 1e-15);
  EXPECT_THROW(adam.state(1), IndexError);
}

// Saves after 3 golden steps, loads into a fresh optimizer over copies of the parameters, and
// checks the next 2 steps match the uninterrupted run exactly.
TEST(OptimState, RoundTripResumesExactly) {
  for (const g::Case& c : g::kCases) {
    std::vector<Tensor> params = golden_params(DType::f64);
    auto opt = make_optimizer(c, params);
    auto run = [&](Optimizer& o, const std::vector<Tensor>& ps, int s) {
      o.set_lr(c.lrs[s]);
      set_golden_grads(ps, s);
      o.step();
    };
    for (int s = 0; s < 3; ++s) run(*opt, params, s);

    std::map<std::string, Tensor> saved = opt->state_dict();
    EXPECT_EQ(saved.at("0.step").item(), 3);
    EXPECT_EQ(saved.at("1.step").item(), 2);
    std::vector<Tensor> resumed_params;
    for (const Tensor& p : params) resumed_params.push_back(p.detach().clone().requires_grad_(true));
    auto resumed = make_optimizer(c, resumed_params);
    resumed->load_state_dict(saved);
    for (auto& [key, t] : saved) t.fill_(123);  // the optimizers must hold copies
    for (int s = 3; s < g::kSteps; ++s) {
      run(*opt, params, s);
      run(*resumed, resumed_params, s);
    }
    EXPECT_EQ(flatten(resumed_params), flatten(params)) << c.name;
    EXPECT_EQ(resumed->step_count(1), opt->step_count(1)) << c.name;
  }
}

TEST(OptimState, LoadRejectsBadDictsAndKeepsOldState) {
  Tensor p = Tensor::full({2}, 1.0, DType::f64).requires_grad_(true);
  p.set_grad(Tensor::full({2}, 0.5, DType::f64));
  Adam opt({p});
  opt.step();
  std::map<std::string, Tensor> good = opt.state_dict();
  EXPECT_EQ(good.size(), 3u);  // 0.step, 0.exp_avg, 0.exp_avg_sq

  auto with = [&](const std::string& key, const Tensor& value) {
    auto d = good;
    d[key] = value;
    return d;
  };
  auto without = [&](const std::string& key) {
    auto d = good;
    d.erase(key);
    return d;
  };
  Tensor buffer = Tensor::zeros({2}, DType::f64);
  EXPECT_THROW(opt.load_state_dict(with("x.exp_avg", buffer)), ValueError);
  EXPECT_THROW(opt.load_state_dict(with("0.", buffer)), ValueError);
  EXPECT_THROW(opt.load_state_dict(with("7.exp_avg", buffer)), IndexError);
  EXPECT_THROW(opt.load_state_dict(with("0.momentum_buffer", buffer)), ValueError);
  EXPECT_THROW(opt.load_state_dict(with("0.exp_avg", Tensor::zeros({3}, DType::f64))), ShapeError);
  EXPECT_THROW(opt.load_state_dict(with("0.step", Tensor::scalar(-1, DType::i64))), ValueError);
  EXPECT_THROW(opt.load_state_dict(without("0.exp_avg")), ValueError);
  EXPECT_THROW(opt.load_state_dict(without("0.step")), ValueError);
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.state(0).size(), 2u);

  opt.load_state_dict({});  // resets
  EXPECT_EQ(opt.step_count(0), 0);
  EXPECT_TRUE(opt.state(0).empty());
  opt.load_state_dict(good);
  EXPECT_EQ(opt.step_count(0), 1);
}

TEST(OptimValidation, RejectsBadHyperparameters) {
  Tensor p = Tensor::ones({2}).requires_grad_(true);
  EXPECT_THROW(SGD({p}, -0.1), ValueError);
  EXPECT_THROW(SGD({p}, std::nan("")), ValueError);
  EXPECT_THROW(SGD({p}, 0.1, {.momentum = -0.5}), ValueError);
  EXPECT_THROW(SGD({p}, 0.1, {.weight_decay = -1}), ValueError);
  EXPECT_THROW(SGD({p}, 0.1, {.nesterov = true}), ValueError);
  EXPECT_THROW(SGD({p}, 0.1, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(Adam({p}, {.lr = -1e-3}), ValueError);
  EXPECT_THROW(Adam({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(Adam({p}, {.beta2 = -0.1}), ValueError);
  EXPECT_THROW(Adam({p}, {.eps = -1e-8}), ValueError);
  EXPECT_THROW(Adam({p}, {.weight_decay = -0.01}), ValueError);
  EXPECT_THROW(AdamW({p}, {.weight_decay = -0.01}), ValueError);
  EXPECT_THROW(AdamW({p}, {.beta1 = 1.5}), ValueError);
  SGD ok({p}, 0.1);
  EXPECT_THROW(ok.set_lr(-1), ValueError);
  EXPECT_EQ(ok.lr(), 0.1);
}

TEST(OptimValidation, RejectsBadParameters) {
  Tensor p = Tensor::ones({2}).requires_grad_(true);
  EXPECT_THROW(SGD({}, 0.1), ValueError);
  EXPECT_THROW(SGD({p, p}, 0.1), ValueError);
  EXPECT_THROW(SGD({Tensor()}, 0.1), ValueError);
  EXPECT_THROW(SGD({p * 2.0}, 0.1), ValueError);  // not a leaf
  EXPECT_THROW(SGD({Tensor::ones({2, 3}).t()}, 0.1), ValueError);  // not contiguous
  EXPECT_THROW(SGD({Tensor::ones({2}, DType::i64)}, 0.1), DTypeError);
  try {
    Adam({Tensor::ones({2}, DType::bf16).requires_grad_(true)});
    FAIL() << "bf16 parameter accepted";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("master weights"), std::string::npos) << e.what();
  }
}

TEST(SchedCosineWarmup, MatchesFormula) {
  const double base = 0.1, min_lr = 0.001;
  const int64_t warmup = 10, total = 100;
  CosineWarmupLR s(base, warmup, total, min_lr);
  for (int64_t t = 0; t < total + 5; ++t) {
    double expected = t < warmup  ? base * static_cast<double>(t) / warmup
                      : t < total ? min_lr + 0.5 * (base - min_lr) *
                                                 (1 + std::cos(std::numbers::pi * static_cast<double>(t - warmup) / (total - warmup)))
                                  : min_lr;
    EXPECT_NEAR(s.lr_at(t), expected, 1e-15) << "step " << t;
  }
  EXPECT_EQ(s.lr_at(0), 0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(warmup), base);
  EXPECT_NEAR(s.lr_at(55), (base + min_lr) / 2, 1e-15);  // halfway through the decay
  EXPECT_EQ(s.lr_at(1000), min_lr);
  for (int64_t t = warmup; t < total; ++t) EXPECT_GT(s.lr_at(t), s.lr_at(t + 1)) << "step " << t;

  CosineWarmupLR no_warmup(1.0, 0, 4);
  EXPECT_EQ(no_warmup.lr_at(0), 1.0);
  EXPECT_NEAR(no_warmup.lr_at(2), 0.5, 1e-15);
}

TEST(SchedStepAndConstant, MatchFormula) {
  StepLR s(0.1, 3, 0.5);
  const double expected[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
  for (int64_t t = 0; t < 7; ++t) EXPECT_DOUBLE_EQ(s.lr_at(t), expected[t]) << "step " << t;
  EXPECT_EQ(ConstantLR(0.3).lr_at(12345), 0.3);
}

TEST(SchedHelper, SetsOptimizerLr) {
  Tensor p = Tensor::ones({1}).requires_grad_(true);
  SGD opt({p}, 1.0);
  CosineWarmupLR s(0.2, 4, 10);
  set_scheduled_lr(opt, s, 2);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
}

TEST(SchedValidation, RejectsBadArguments) {
  EXPECT_THROW(CosineWarmupLR(0.1, 11, 10), ValueError);
  EXPECT_THROW(CosineWarmupLR(0.1, -1, 10), ValueError);
  EXPECT_THROW(CosineWarmupLR(0.1, 0, 0), ValueError);
  EXPECT_THROW(CosineWarmupLR(-0.1, 1, 10), ValueError);
  EXPECT_THROW(CosineWarmupLR(0.1, 1, 10, -0.01), ValueError);
  EXPECT_THROW(CosineWarmupLR(0.1, 1, 10, 0.2), ValueError);
  EXPECT_THROW(CosineWarmupLR(0.1, 1, 10).lr_at(-1), ValueError);
  EXPECT_THROW(StepLR(0.1, 0), ValueError);
  EXPECT_THROW(StepLR(0.1, 5, 0), ValueError);
  EXPECT_THROW(StepLR(-0.1, 5), ValueError);
  EXPECT_THROW(ConstantLR(-1), ValueError);
}

void expect_clip_matches_torch(DType dtype, double tol) {
  for (const g::ClipCase& c : g::kClipCases) {
    std::vector<Tensor> params = golden_params(dtype);
    std::vector<Tensor> grads = split(g::kGrads[0], dtype);
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
    std::string what = str("max_norm ", c.max_norm, " norm_type ", c.norm_type, " ", dtype_name(dtype));
    EXPECT_NEAR(clip_grad_norm(params, c.max_norm, c.norm_type), c.total_norm, tol * c.total_norm) << what;
    expect_close(flat_grads(params), c.clipped, tol, what);
  }
}

TEST(ClipGradNorm, F64MatchesTorch) { expect_clip_matches_torch(DType::f64, 1e-12); }

TEST(ClipGradNorm, F32MatchesTorchLoosely) { expect_clip_matches_torch(DType::f32, 1e-5); }

TEST(ClipGradNorm, IgnoresParametersWithoutGrad) {
  Tensor a = Tensor::ones({2}).requires_grad_(true);
  Tensor b = Tensor::ones({2}).requires_grad_(true);
  EXPECT_EQ(clip_grad_norm({a, b}, 1.0), 0);
  a.set_grad(Tensor::from_vector(std::vector<float>{3, 4}, {2}));
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad().at({1}), 0.8, 1e-6);
  EXPECT_FALSE(b.grad().defined());
}

TEST(ClipGradNorm, NonContiguousGradient) {
  Tensor p = Tensor::zeros({2, 2}, DType::f64).requires_grad_(true);
  Tensor base = Tensor::from_vector(std::vector<double>{3, 0, 4, 0}, {2, 2});
  p.set_grad(base.t());
  EXPECT_DOUBLE_EQ(clip_grad_norm({p}, 2.5), 5.0);
  EXPECT_NEAR(base.at({1, 0}), 4 * 2.5 / (5 + 1e-6), 1e-15);  // scaled in place, through the view
}

// As PyTorch with error_if_nonfinite=False: a non-finite norm is returned and still scales.
TEST(ClipGradNorm, NonFiniteNormScalesLikePyTorch) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = Tensor::ones({2}, DType::f64).requires_grad_(true);
  Tensor b = Tensor::ones({2}, DType::f64).requires_grad_(true);
  a.set_grad(Tensor::from_vector(std::vector<double>{inf, 1}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<double>{2, 3}, {2}));
  EXPECT_EQ(clip_grad_norm({a, b}, 1.0), inf);
  EXPECT_TRUE(std::isnan(a.grad().at({0})));  // inf * 0
  EXPECT_EQ(a.grad().at({1}), 0);
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0, 0}));

  b.set_grad(Tensor::from_vector(std::vector<double>{std::nan(""), 3}, {2}));
  a.set_grad(Tensor::from_vector(std::vector<double>{1, 1}, {2}));
  EXPECT_TRUE(std::isnan(clip_grad_norm({a, b}, 1.0)));
  EXPECT_TRUE(std::isnan(a.grad().at({0})));
  a.set_grad(Tensor::from_vector(std::vector<double>{1, 1}, {2}));
  EXPECT_TRUE(std::isnan(clip_grad_norm({a, b}, 1.0, inf)));
}

TEST(ClipGradNorm, RejectsBadArguments) {
  Tensor a = Tensor::ones({2}).requires_grad_(true);
  EXPECT_THROW(clip_grad_norm({a}, -1.0), ValueError);
  EXPECT_THROW(clip_grad_norm({a}, 1.0, 0), ValueError);
  EXPECT_THROW(clip_grad_norm({a}, 1.0, -2), ValueError);
}

// Two micro-batches through a weight used twice (as a tied embedding is) and a bias; one more
// parameter gets its gradient by hand, outside any backward. Armed before the second backward,
// the hooks' shares add up to grad_norm's bits.
TEST(BackwardGradNorm, EqualsGradNormBitForBit) {
  for (double norm_type : {2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Generator gen(7);
    Tensor w = Tensor::randn({40000, 3}, gen).requires_grad_(true);  // three chunks of the norm's
    Tensor b = Tensor::randn({5}, gen).requires_grad_(true);
    Tensor by_hand = Tensor::randn({4}, gen).requires_grad_(true);
    Tensor idle = Tensor::randn({6}, gen).requires_grad_(true);  // never gets a gradient
    BackwardGradNorm tally({w, b, by_hand, idle}, norm_type);
    auto micro_batch = [&] {
      Tensor x = Tensor::randn({2, 3}, gen);
      Tensor y = linear(x, w);
      sum(add(mul(y, y), mul(sum(mul(w, w)), 0.5))).backward();
      sum(mul(b, b)).backward();
    };
    micro_batch();
    tally.arm();
    micro_batch();
    by_hand.set_grad(Tensor::randn({4}, gen));
    const double expected = grad_norm({w, b, by_hand, idle}, norm_type);
    ASSERT_GT(expected, 0);
    EXPECT_EQ(tally.norm(), expected) << "norm_type " << norm_type;
  }
}

// arm() drops the shares of an earlier step: a gradient that grew since is read as it is now.
TEST(BackwardGradNorm, ArmForgetsEarlierShares) {
  Tensor w = Tensor::ones({3}).requires_grad_(true);
  BackwardGradNorm tally({w});
  tally.arm();
  sum(mul(w, 2.0)).backward();  // grad 2: share taken
  EXPECT_DOUBLE_EQ(tally.norm(), std::sqrt(12.0));
  sum(mul(w, 2.0)).backward();  // disarmed: grad 4, no share
  tally.arm();
  EXPECT_DOUBLE_EQ(tally.norm(), std::sqrt(48.0));
}

// Its hooks go with it: a backward after it is gone runs as before.
TEST(BackwardGradNorm, RemovesItsHooks) {
  Tensor w = Tensor::ones({3}).requires_grad_(true);
  { BackwardGradNorm(std::vector<Tensor>{w}).arm(); }
  sum(mul(w, 2.0)).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_THROW(BackwardGradNorm({w}, 0), ValueError);
}

}  // namespace
}  // namespace weft::optim
