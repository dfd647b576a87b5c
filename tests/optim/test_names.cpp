// The optimizer vocabulary (optim/kind.h) and optimizer state keyed by parameter name.
#include <gtest/gtest.h>

#include <memory>

#include "expect_error.h"
#include "weft/optim/adam.h"
#include "weft/optim/kind.h"
#include "weft/optim/sgd.h"

namespace weft::optim {
namespace {

using testing::contains;
using testing::message_of;

// The rule each name stands for, as weft builds it.
std::unique_ptr<Optimizer> make(OptimizerKind kind, std::vector<Tensor> params) {
  switch (kind) {
    case OptimizerKind::sgd: return std::make_unique<SGD>(std::move(params), 0.1);
    case OptimizerKind::momentum: return std::make_unique<SGD>(std::move(params), 0.1, SGDOptions{.momentum = 0.9});
    case OptimizerKind::adam: return std::make_unique<Adam>(std::move(params));
    case OptimizerKind::adamw: return std::make_unique<AdamW>(std::move(params));
  }
  return nullptr;
}

TEST(OptimizerKind, NamesRoundTripAndStateBuffersMatchTheRules) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::momentum, OptimizerKind::adam, OptimizerKind::adamw}) {
    EXPECT_EQ(parse_optimizer(optimizer_name(kind)), kind);
    Tensor p = Tensor::ones({3}).requires_grad_(true);
    p.set_grad(Tensor::ones({3}));
    auto optimizer = make(kind, {p});
    optimizer->step();
    EXPECT_EQ(static_cast<int>(optimizer->state(0).size()), state_buffers(kind)) << optimizer_name(kind);
  }
  std::string message = message_of<ValueError>([] { parse_optimizer("lion"); });
  EXPECT_TRUE(contains(message, "'lion'") && contains(message, "adamw")) << message;
}

TEST(OptimState, KeyedByParameterNameWithDots) {
  Tensor w = Tensor::full({2}, 1.0, DType::f64).requires_grad_(true), b = Tensor::full({1}, 2.0, DType::f64).requires_grad_(true);
  const std::vector<std::string> names = {"h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias"};
  Adam opt({w, b});
  w.set_grad(Tensor::full({2}, 0.5, DType::f64));
  b.set_grad(Tensor::full({1}, 0.25, DType::f64));
  opt.step();
  const std::map<std::string, Tensor> dict = opt.state_dict(names);
  std::vector<std::string> keys;
  for (const auto& [key, value] : dict) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"h.0.attn.c_attn.bias.exp_avg", "h.0.attn.c_attn.bias.exp_avg_sq",
                                            "h.0.attn.c_attn.bias.step", "h.0.attn.c_attn.weight.exp_avg",
                                            "h.0.attn.c_attn.weight.exp_avg_sq", "h.0.attn.c_attn.weight.step"}));

  // Loaded into an optimizer whose parameters come in the other order, state follows the names.
  Tensor w2 = w.detach().clone(), b2 = b.detach().clone();
  Adam swapped({b2, w2});
  swapped.load_state_dict(dict, {names[1], names[0]});
  EXPECT_EQ(swapped.state(1)[0].second.to_vector<double>(), opt.state(0)[0].second.to_vector<double>());
  EXPECT_EQ(swapped.state(0)[1].second.to_vector<double>(), opt.state(1)[1].second.to_vector<double>());

  std::string renamed = message_of<ValueError>([&] { swapped.load_state_dict(dict, {"bias", "weight"}); });
  EXPECT_TRUE(contains(renamed, "'h.0.attn.c_attn.bias'") && contains(renamed, "no parameter of that name")) << renamed;
  EXPECT_EQ(swapped.step_count(0), 1) << "a rejected dict leaves the state as it was";
  auto without_buffer = dict;
  without_buffer.erase("h.0.attn.c_attn.weight.exp_avg_sq");
  std::string missing = message_of<ValueError>([&] { swapped.load_state_dict(without_buffer, {names[1], names[0]}); });
  EXPECT_TRUE(contains(missing, "parameter 'h.0.attn.c_attn.weight'")) << missing;
  EXPECT_THROW(opt.state_dict({"only one"}), ValueError);
  EXPECT_THROW(opt.state_dict({"same", "same"}), ValueError);
}

}  // namespace
}  // namespace weft::optim
