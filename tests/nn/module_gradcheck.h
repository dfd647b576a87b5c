// Finite-difference check of a whole module: the gradients of sum(f() * w) w.r.t. leaves that
// f reads in place (a module's parameters after to(DType::f64), and its input).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"

namespace weft::testing {

inline void expect_leaves_gradcheck(const std::function<Tensor()>& f, const std::vector<std::pair<std::string, Tensor>>& leaves,
                                    double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  for (const auto& [name, t] : leaves) {
    ASSERT_EQ(t.dtype(), DType::f64) << name;
    ASSERT_TRUE(t.is_leaf() && t.requires_grad() && t.is_contiguous()) << name;
    t.set_grad(Tensor());
  }
  Tensor out = f();
  Generator gen(1234);
  Tensor w = Tensor::randn(out.shape(), gen, DType::f64);
  sum(mul(out, w)).backward();
  auto objective = [&] {
    NoGradGuard no_grad;
    return sum(mul(f(), w)).item();
  };
  for (const auto& [name, t] : leaves) {
    ASSERT_TRUE(t.grad().defined()) << name << " got no gradient";
    std::vector<double> analytic = t.grad().to_vector<double>();
    double* p = t.data<double>();
    for (int64_t j = 0; j < t.numel(); ++j) {
      double saved = p[j];
      p[j] = saved + eps;
      double plus = objective();
      p[j] = saved - eps;
      double minus = objective();
      p[j] = saved;
      double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic[j], numeric, atol + rtol * std::abs(numeric)) << name << " element " << j;
    }
  }
}

}  // namespace weft::testing
