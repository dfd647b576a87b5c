#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/quant/observer.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

Tensor range_tensor(int n, float offset = 0) {  // offset + 1, ..., offset + n, shuffled
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = offset + static_cast<float>((i * 7919) % n + 1);
  return Tensor::from_vector(v, {n});
}

TEST(Observer, MinMaxKeepsTheExtremesOfAllBatches) {
  quant::MinMaxObserver o;
  o.observe(Tensor::from_vector<float>({1, 2, 3}, {3}));
  o.observe(Tensor::from_vector<float>({-0.5f, 0.5f}, {2, 1}));
  o.observe(Tensor::from_vector<float>({std::nanf(""), 2.5f}, {2}));
  EXPECT_EQ(o.range().min, -0.5f);
  EXPECT_EQ(o.range().max, 3.0f);
  EXPECT_EQ(o.batches(), 3);
  cpu::QuantParams p = o.quant_params();
  EXPECT_FLOAT_EQ(p.scale, 3.5f / 255);
  EXPECT_EQ(p.zero_point, 36);  // round(0.5 / (3.5 / 255)) = round(36.43)
}

TEST(Observer, PercentileClipsTheTailsOfEachBatchAndAveragesThem) {
  quant::PercentileObserver o(99);
  o.observe(range_tensor(10000));  // nearest rank: the 9900th and the 100th smallest
  EXPECT_EQ(o.range().max, 9900);
  EXPECT_EQ(o.range().min, 100);
  o.observe(range_tensor(10000, 100));
  EXPECT_EQ(o.range().max, 9950);
  EXPECT_EQ(o.range().min, 150);
  quant::PercentileObserver whole(100);
  whole.observe(range_tensor(50));
  EXPECT_EQ(whole.range().min, 1);
  EXPECT_EQ(whole.range().max, 50);
}

TEST(Observer, AnOutlierStretchesMinMaxButNotPercentile) {
  std::vector<float> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i));
  v[123] = 1000;
  Tensor x = Tensor::from_vector(v, {100000});
  quant::MinMaxObserver minmax;
  quant::PercentileObserver percentile(99.99);
  minmax.observe(x);
  percentile.observe(x);
  EXPECT_EQ(minmax.range().max, 1000);
  EXPECT_LE(percentile.range().max, 1.0f);
  EXPECT_GT(percentile.range().max, 0.99f);
}

TEST(Observer, MisuseIsAnError) {
  quant::MinMaxObserver o;
  EXPECT_TRUE(contains(message_of<ValueError>([&] { o.range(); }), "no data observed"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { o.observe(Tensor::ones({2}, DType::f64)); }), "f64"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { quant::PercentileObserver(40); }), "(50, 100]"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { quant::make_observer("entropy"); }), "minmax or percentile"));
  EXPECT_EQ(quant::make_observer("percentile", 99.9)->describe(), "percentile 99.9");
}

}  // namespace
}  // namespace weft
