// Finite-difference gradient checks in f64, the test every differentiable op must pass.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/tensor.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"

namespace weft::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks d(sum(f(inputs) * w))/d(input) for a fixed random w against central differences.
// Inputs are copied to f64 leaves; pass `needs_grad` to exclude some (indices, masks).
inline void expect_gradcheck(const Fn& f, const std::vector<Tensor>& inputs, std::vector<bool> needs_grad = {},
                             double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  if (needs_grad.empty()) needs_grad.assign(inputs.size(), true);
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = needs_grad[i] ? inputs[i].detach().to(DType::f64).contiguous().clone().detach() : inputs[i];
    if (needs_grad[i]) t.requires_grad_(true);
    leaves.push_back(t);
  }
  Tensor out = f(leaves);
  Generator gen(1234);
  Tensor w = Tensor::randn(out.shape(), gen, DType::f64);
  sum(mul(out, w)).backward();
  auto objective = [&] {
    NoGradGuard no_grad;
    return sum(mul(f(leaves), w)).item();
  };
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!needs_grad[i]) continue;
    ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i << " got no gradient";
    ASSERT_EQ(leaves[i].grad().shape(), leaves[i].shape()) << "input " << i;
    std::vector<double> analytic = leaves[i].grad().to_vector<double>();
    double* p = leaves[i].data<double>();
    for (int64_t j = 0; j < leaves[i].numel(); ++j) {
      double saved = p[j];
      p[j] = saved + eps;
      double plus = objective();
      p[j] = saved - eps;
      double minus = objective();
      p[j] = saved;
      double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic[j], numeric, atol + rtol * std::abs(numeric)) << "input " << i << " element " << j;
    }
  }
}

inline Tensor randn64(const Shape& shape, uint64_t seed = 0) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, DType::f64);
}

}  // namespace weft::testing
