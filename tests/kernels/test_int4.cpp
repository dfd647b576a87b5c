#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/kernels/cpu/int4.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

Tensor random_nibbles(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(numel(shape));
  for (double& x : v) x = -8 + std::floor(gen.uniform() * 16);
  return Tensor::from_vector(v, shape, DType::i8);
}

TEST(Int4Kernel, PacksTwoPerByteLowNibbleFirst) {
  Tensor q = Tensor::from_vector<int8_t>({1, -1, 7, -8, 3}, {1, 5});
  Tensor packed = cpu::pack_int4(q);
  EXPECT_EQ(packed.shape(), (Shape{1, 3}));
  EXPECT_EQ(packed.to_vector<int>(), (std::vector<int>{0xF1, 0x87, 0x03}));  // odd K: the pad nibble is 0
  EXPECT_EQ(cpu::unpack_int4(packed, 5).to_vector<int>(), q.to_vector<int>());
  Tensor big = random_nibbles({17, 33}, 1);
  EXPECT_EQ(cpu::unpack_int4(cpu::pack_int4(big), 33).to_vector<int>(), big.to_vector<int>());
}

TEST(Int4Kernel, DequantizeUsesOneScalePerGroupIncludingARaggedLastOne) {
  Tensor q = Tensor::from_vector<int8_t>({1, 2, 3, 4, 5, -1, -2, -3, -4, -5}, {2, 5});
  Tensor scales = Tensor::from_vector<float>({0.5f, 2.0f, 1.0f, 0.25f}, {2, 2});  // groups of 3: [0..2], [3, 4]
  Tensor w = cpu::dequantize_int4(cpu::pack_int4(q), scales, 5, 3);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f, 8, 10, -1, -2, -3, -1, -1.25f}));
}

TEST(Int4Kernel, LinearMatchesReference) {
  Generator gen(2);
  // Up to 8 rows (decoding) the weight is read packed (kernels/cpu/weight_only.h); from 9, expanded.
  for (auto [M, K, N, group] : {std::tuple{1, 64, 10, 32}, {7, 784, 33, 32}, {128, 50, 20, 32}, {3, 9, 4, 4},
                                {8, 33, 5, 32}, {9, 33, 5, 32}, {2, 1, 3, 32}, {5, 70, 6, 16}}) {
    Tensor packed = cpu::pack_int4(random_nibbles({N, K}, 3 + K));
    Tensor scales = Tensor::rand({N, (K + group - 1) / group}, gen);
    Tensor x = Tensor::randn({M, K}, gen), bias = Tensor::randn({N}, gen);
    Tensor fast = cpu::int4_linear(x, packed, scales, group, bias), ref = cpu::reference::int4_linear(x, packed, scales, group, bias);
    std::vector<double> f = fast.to_vector<double>(), r = ref.to_vector<double>();
    ASSERT_EQ(fast.shape(), (Shape{M, N}));
    for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(f[i], r[i], 1e-4 * (1 + std::abs(r[i]))) << i;
    std::vector<double> no_bias = cpu::int4_linear(x, packed, scales, group, {}).to_vector<double>();
    std::vector<double> ref_no_bias = cpu::reference::int4_linear(x, packed, scales, group, {}).to_vector<double>();
    for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(no_bias[i], ref_no_bias[i], 1e-4 * (1 + std::abs(ref_no_bias[i])));
  }
}

TEST(Int4Kernel, BadInputsAreErrors) {
  EXPECT_TRUE(contains(message_of<ValueError>([] { cpu::pack_int4(Tensor::from_vector<int8_t>({8}, {1, 1})); }),
                       "4 bits"));
  Tensor packed = cpu::pack_int4(random_nibbles({4, 64}, 5));
  Tensor scales = Tensor::ones({4, 2});
  Tensor x = Tensor::ones({2, 64});
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int4_linear(x, packed, Tensor::ones({4, 3}), 32, {}); }),
                       "scales"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int4_linear(Tensor::ones({2, 62}), packed, scales, 32, {}); }),
                       "[4, 32]"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int4_linear(x, packed, scales, 32, Tensor::ones({5})); }),
                       "bias"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::int4_linear(x, packed, scales, 0, {}); }), "group size"));
}

}  // namespace
}  // namespace weft
