#include "weft/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/core/threads.h"
#include "weft/ops/arith.h"

namespace weft::amp {

namespace {

// g *= inv_scale in place; returns whether every result is finite.
template <typename T>
bool unscale_and_check(T* g, int64_t n, T inv_scale) {
  bool finite = true;
#pragma omp parallel for reduction(&& : finite) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    g[i] *= inv_scale;
    finite = finite && std::isfinite(g[i]);
  }
  return finite;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  WEFT_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), ValueError,
             "GradScaler: init_scale must be positive and finite, got ", options.init_scale);
  WEFT_CHECK(options.growth_factor > 1, ValueError, "GradScaler: growth_factor must be > 1, got ", options.growth_factor);
  WEFT_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, ValueError,
             "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  WEFT_CHECK(options.growth_interval >= 1, ValueError, "GradScaler: growth_interval must be >= 1, got ",
             options.growth_interval);
  WEFT_CHECK(options.min_scale > 0 && options.min_scale <= options.init_scale, ValueError,
             "GradScaler: min_scale must be in (0, init_scale], got ", options.min_scale);
  state_.scale = options.init_scale;
}

Tensor GradScaler::scale(const Tensor& loss) const { return mul(loss, state_.scale); }

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  WEFT_CHECK(!unscaled_, ValueError, "GradScaler: unscale_ was already called this step; call update() after step()");
  NoGradGuard no_grad;
  bool finite = true;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous_untracked();
      p.set_grad(g);
    }
    if (g.dtype() == DType::f64) finite &= unscale_and_check(g.data<double>(), g.numel(), 1 / state_.scale);
    else finite &= unscale_and_check(g.data<float>(), g.numel(), static_cast<float>(1 / state_.scale));
  }
  unscaled_ = true;
  found_inf_ = !finite;
}

bool GradScaler::step(optim::Optimizer& optimizer, double grad_factor) {
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step(grad_factor);
  return true;
}

void GradScaler::update() {
  if (found_inf_) {
    ++state_.skipped_steps;
    state_.overflows_at_minimum = state_.scale <= options_.min_scale ? state_.overflows_at_minimum + 1 : 0;
    state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
    state_.growth_tracker = 0;
  } else {
    state_.overflows_at_minimum = 0;
    if (++state_.growth_tracker == options_.growth_interval) {
      state_.scale *= options_.growth_factor;
      state_.growth_tracker = 0;
    }
  }
  unscaled_ = found_inf_ = false;
}

void GradScaler::load_state(const GradScalerState& state) {
  WEFT_CHECK(state.scale > 0 && std::isfinite(state.scale), ValueError,
             "GradScaler: a saved scale must be positive and finite, got ", state.scale);
  state_ = state;
}

}  // namespace weft::amp
