#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/layers.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"

namespace weft::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename M, typename... Args>
std::shared_ptr<M> make(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)...);
}

std::vector<std::string> names(const NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}

std::shared_ptr<Sequential> mlp() {
  return make<Sequential>(make<Flatten>(), make<Linear>(784, 512), make<ReLU>(), make<Linear>(512, 256), make<ReLU>(),
                          make<Linear>(256, 10));
}

// conv 1->32 3x3, pool, conv 32->64 3x3, pool, fc 1600->128, fc 128->10 (28x28 -> 26 -> 13 -> 11 -> 5).
std::shared_ptr<Sequential> cnn() {
  return make<Sequential>(make<Conv2d>(1, 32, 3), make<ReLU>(), make<MaxPool2d>(2), make<Conv2d>(32, 64, 3),
                          make<ReLU>(), make<MaxPool2d>(2), make<Flatten>(), make<Linear>(1600, 128), make<ReLU>(),
                          make<Linear>(128, 10));
}

// Small conv net with a BatchNorm, so state dicts carry buffers too.
std::shared_ptr<Sequential> small_net() {
  return make<Sequential>(make<Conv2d>(2, 4, 3, 1, 1), make<BatchNorm2d>(4), make<ReLU>(), make<Flatten>(),
                          make<Linear>(4 * 5 * 5, 3));
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

TEST(Module, HierarchicalNamesInRegistrationOrder) {
  auto inner = make<Sequential>(make<Linear>(3, 2), make<ReLU>(), make<BatchNorm2d>(2));
  auto model = make<Sequential>(make<Linear>(4, 3, false), inner, make<Linear>(2, 1));
  EXPECT_THAT(names(model->named_parameters()),
              ElementsAre("0.weight", "1.0.weight", "1.0.bias", "1.2.weight", "1.2.bias", "2.weight", "2.bias"));
  EXPECT_THAT(names(model->named_buffers()),
              ElementsAre("1.2.running_mean", "1.2.running_var", "1.2.num_batches_tracked"));
  // The state dict lists each module's parameters, then its buffers, then its children's.
  std::vector<std::string> keys;
  for (const auto& [key, t] : model->state_dict()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("0.weight", "1.0.weight", "1.0.bias", "1.2.weight", "1.2.bias", "1.2.running_mean",
                                "1.2.running_var", "1.2.num_batches_tracked", "2.weight", "2.bias"));
  EXPECT_EQ(model->size(), 3u);
  EXPECT_EQ((*model)[1], inner);
  EXPECT_TRUE(model->parameters()[0].is_same(std::static_pointer_cast<Linear>((*model)[0])->weight));
}

TEST(Module, ParameterCounts) {
  auto linear_params = [](int64_t in, int64_t out) { return in * out + out; };
  auto conv_params = [](int64_t in, int64_t out, int64_t k) { return in * out * k * k + out; };
  int64_t mlp_expected = linear_params(784, 512) + linear_params(512, 256) + linear_params(256, 10);
  int64_t cnn_expected = conv_params(1, 32, 3) + conv_params(32, 64, 3) + linear_params(1600, 128) + linear_params(128, 10);
  EXPECT_EQ(mlp_expected, 535'818);
  EXPECT_EQ(cnn_expected, 225'034);
  EXPECT_EQ(mlp()->num_parameters(), 535'818);
  auto net = cnn();
  EXPECT_EQ(net->num_parameters(), 225'034);
  EXPECT_EQ((*net)(Tensor::randn({2, 1, 28, 28})).shape(), (Shape{2, 10}));
  // A GPT-2 block: 12 * dim^2 weights + 13 * dim biases and norm parameters.
  EXPECT_EQ(TransformerBlock(64, 4).num_parameters(), 12 * 64 * 64 + 13 * 64);
}

TEST(Module, RegistrationRules) {
  Linear layer(2, 2);
  EXPECT_THROW(layer.register_parameter("weight", Tensor::zeros({1})), ValueError);
  EXPECT_THROW(layer.register_buffer("a.b", Tensor::zeros({1})), ValueError);
  EXPECT_THROW(layer.register_module("", make<ReLU>()), ValueError);
  EXPECT_THROW(layer.register_parameter("steps", Tensor::zeros({1}, DType::i64)), DTypeError);
  // A parameter is always a leaf that requires grad.
  Tensor computed = mul(Tensor::ones({2}).requires_grad_(), 2.0);
  Tensor p = layer.register_parameter("scale", computed);
  EXPECT_TRUE(p.is_leaf() && p.requires_grad());
  EXPECT_EQ(layer.num_parameters(), 4 + 2 + 2);
}

TEST(Module, TiedParametersCountOnceButSaveUnderEachName) {
  auto embed = make<Embedding>(10, 4);
  Sequential model(embed);
  model.register_parameter("head", embed->weight);  // an output head sharing the embedding, as GPT-2's
  EXPECT_EQ(model.num_parameters(), 40);
  EXPECT_THAT(names(model.named_parameters()), ElementsAre("head"));
  std::vector<std::string> keys;
  for (const auto& [key, t] : model.state_dict()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("head", "0.weight"));
  model.to(DType::f64);
  EXPECT_EQ(embed->weight.dtype(), DType::f64);
}

TEST(Module, StateDictRoundTripGivesIdenticalOutputs) {
  manual_seed(1);
  auto a = small_net();
  Tensor x = Tensor::randn({3, 2, 5, 5});
  (*a)(x);  // a training step moves BatchNorm's running statistics away from their defaults
  a->eval();
  Tensor expected = (*a)(x);

  manual_seed(2);
  auto b = small_net();
  b->eval();
  EXPECT_FALSE(same_values((*b)(x), expected));
  Tensor b_weight = std::static_pointer_cast<Conv2d>((*b)[0])->weight;
  LoadResult result = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  EXPECT_TRUE(same_values((*b)(x), expected));
  // Loaded in place: the layer's handle is still the registered parameter, a leaf requiring grad.
  EXPECT_TRUE(b_weight.is_same(b->parameters()[0]));
  EXPECT_TRUE(b_weight.is_leaf() && b_weight.requires_grad());
  EXPECT_EQ(b->state_dict().at("1.num_batches_tracked").item(), 1);
  // The state dict shares storage with the model: no copy, no history.
  Tensor saved = a->state_dict().at("0.weight");
  EXPECT_EQ(saved.data_ptr(), std::static_pointer_cast<Conv2d>((*a)[0])->weight.data_ptr());
  EXPECT_FALSE(saved.requires_grad());
}

TEST(Module, LoadConvertsDtype) {
  Linear a(3, 2), b(3, 2);
  StateDict state;
  for (const auto& [key, t] : a.state_dict()) state.insert(key, t.to(DType::f64));
  b.load_state_dict(state);
  EXPECT_EQ(b.weight.dtype(), DType::f32);
  EXPECT_TRUE(same_values(a.weight, b.weight));
}

TEST(Module, StrictLoadNamesTheOffendingKeys) {
  Linear model(3, 2);
  Tensor before = model.weight.clone();
  StateDict missing = Linear(3, 2).state_dict();
  missing.erase("bias");
  try {
    model.load_state_dict(missing);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing keys [bias]"));
  }

  StateDict extra = Linear(3, 2).state_dict();
  extra.insert("scale", Tensor::ones({2}));
  extra.insert("shift", Tensor::ones({2}));
  try {
    model.load_state_dict(extra);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unexpected keys [scale, shift]"));
  }

  StateDict wrong_shape = Linear(4, 2).state_dict();
  for (bool strict : {true, false}) {
    try {
      model.load_state_dict(wrong_shape, strict);
      FAIL() << "expected ShapeError";
    } catch (const ShapeError& e) {
      EXPECT_THAT(e.what(), HasSubstr("weight"));
      EXPECT_THAT(e.what(), HasSubstr("[2, 4]"));
      EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
    }
  }
  EXPECT_TRUE(same_values(model.weight, before));  // nothing is copied unless every check passes

  LoadResult partial = model.load_state_dict(missing, /*strict=*/false);
  EXPECT_THAT(partial.missing_keys, ElementsAre("bias"));
  EXPECT_TRUE(same_values(model.weight, missing.at("weight")));
  LoadResult extras = model.load_state_dict(extra, /*strict=*/false);
  EXPECT_THAT(extras.unexpected_keys, ElementsAre("scale", "shift"));
}

TEST(Module, TrainEvalSwitchesDropoutAndBatchNorm) {
  auto dropout = make<Dropout>(0.5);
  auto bn = make<BatchNorm2d>(2);
  auto model = make<Sequential>(make<Sequential>(bn), dropout);
  EXPECT_TRUE(dropout->is_training() && bn->is_training());
  model->eval();
  EXPECT_FALSE(dropout->is_training() || bn->is_training());
  Tensor x = Tensor::randn({4, 2, 3, 3});
  EXPECT_TRUE(same_values((*dropout)(x), x));
  // Eval BatchNorm with fresh running stats (mean 0, var 1) is x / sqrt(1 + eps), and counts nothing.
  EXPECT_NEAR((*bn)(x).at({1, 1, 2, 0}), x.at({1, 1, 2, 0}) / std::sqrt(1 + 1e-5), 1e-6);
  EXPECT_EQ(bn->num_batches_tracked.item(), 0);

  model->train();
  EXPECT_TRUE(dropout->is_training() && bn->is_training());
  std::vector<double> dropped = (*dropout)(Tensor::ones({1000})).to_vector<double>();
  int zeros = 0;
  for (double v : dropped) {
    EXPECT_TRUE(v == 0 || v == 2);
    zeros += v == 0;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  // Training BatchNorm normalises with the batch statistics: every channel comes out with mean 0.
  Tensor y = (*bn)(mul(x, 3.0) + 5.0);
  for (double m : mean(y, {0, 2, 3}).to_vector<double>()) EXPECT_NEAR(m, 0, 1e-5);
  EXPECT_EQ(bn->num_batches_tracked.item(), 1);
  for (double m : bn->running_mean.to_vector<double>()) EXPECT_NE(m, 0);
}

TEST(Module, ToDtypeConvertsInPlace) {
  auto model = small_net();
  auto conv = std::static_pointer_cast<Conv2d>((*model)[0]);
  Tensor handle = conv->weight;
  std::vector<double> values = handle.to_vector<double>();
  sum((*model)(Tensor::randn({2, 2, 5, 5}))).backward();
  model->to(DType::f64);
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f64) << name;
    EXPECT_TRUE(p.is_leaf() && p.requires_grad()) << name;
    EXPECT_EQ(p.grad().dtype(), DType::f64) << name;
  }
  EXPECT_EQ(handle.dtype(), DType::f64);  // the layer's own handle sees the conversion
  EXPECT_EQ(handle.to_vector<double>(), values);  // f32 -> f64 is exact
  auto bn = std::static_pointer_cast<BatchNorm2d>((*model)[1]);
  EXPECT_EQ(bn->running_var.dtype(), DType::f64);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::i64);
  EXPECT_EQ((*model)(Tensor::randn({2, 2, 5, 5}, DType::f64)).dtype(), DType::f64);
  EXPECT_THROW(model->to(DType::i32), DTypeError);
}

TEST(Module, ZeroGradDropsGradients) {
  Linear layer(3, 2);
  sum(layer(Tensor::randn({4, 3}))).backward();
  EXPECT_TRUE(layer.weight.grad().defined() && layer.bias.grad().defined());
  layer.zero_grad();
  EXPECT_FALSE(layer.weight.grad().defined() || layer.bias.grad().defined());
}

TEST(Module, ReprPrintsTheTreeLikePyTorch) {
  auto model = make<Sequential>(make<Conv2d>(1, 8, 3, 1, 1), make<Sequential>(make<ReLU>(), make<Dropout>(0.25)),
                                make<Linear>(8, 2, false));
  EXPECT_EQ(model->repr(),
            "Sequential(\n"
            "  (0): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (1): Sequential(\n"
            "    (0): ReLU()\n"
            "    (1): Dropout(p=0.25)\n"
            "  )\n"
            "  (2): Linear(in_features=8, out_features=2, bias=False)\n"
            ")");
}

}  // namespace
}  // namespace weft::nn
