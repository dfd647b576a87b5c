// How far apart two results are, in f64: the distributed tests' one comparison against the
// one-process reference, for a tensor, a list of tensors in the same order, or tensors by name.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::testing {

inline double largest_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

inline double largest_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) worst = std::max(worst, largest_difference(a[k], b[k]));
  return worst;
}

inline double largest_difference(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, x] : a) {
    SCOPED_TRACE(name);
    const auto y = b.find(name);
    if (y == b.end()) {
      ADD_FAILURE() << name << " is missing";
      continue;
    }
    worst = std::max(worst, largest_difference(x, y->second));
  }
  return worst;
}

}  // namespace weft::testing
