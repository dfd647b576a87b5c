// Post-training quantization end to end: quantized layers against their f32 originals,
// calibration, conversion of the built-in models, and quantized checkpoints (round trip and
// every way a file can be wrong).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/io/safetensors.h"
#include "weft/nn/layers.h"
#include "weft/nn/models.h"
#include "weft/quant/checkpoint.h"
#include "weft/quant/conv.h"
#include "weft/quant/linear.h"
#include "weft/quant/ptq.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::message_of;

Tensor randn(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::randn(shape, gen);
}

// max |a - b| relative to max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / scale;
}

std::vector<Tensor> batches(const Shape& shape, int count, uint64_t seed) {
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) out.push_back(randn(shape, seed + i));
  return out;
}

TEST(QuantizedLayers, LinearIsCloseToF32AndKeepsLeadingDims) {
  manual_seed(1);
  nn::Linear linear(64, 48);
  Tensor x = randn({3, 5, 64}, 2);
  cpu::MinMax r = cpu::aminmax(x);
  auto q = quant::QuantizedLinear::from_float(linear, cpu::choose_quant_params(r.min, r.max, DType::u8));
  NoGradGuard no_grad;
  Tensor expected = linear(x), got = (*q)(x);
  EXPECT_EQ(got.shape(), (Shape{3, 5, 48}));
  EXPECT_LT(relative_error(got, expected), 0.02);
  auto dynamic = quant::DynamicQuantizedLinear::from_float(linear);
  EXPECT_LT(relative_error((*dynamic)(x), expected), 0.02);
  auto int4 = quant::Int4Linear::from_float(linear, 32);
  EXPECT_LT(relative_error((*int4)(x), expected), 0.15);
  EXPECT_EQ(q->state_dict().at("weight").dtype(), DType::i8);
  EXPECT_EQ(int4->state_dict().at("weight").shape(), (Shape{48, 32}));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { (*q)(randn({2, 63}, 3)); }), "expected 64"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { (*dynamic)(x.to(DType::f64)); }), "f32"));
}

TEST(QuantizedLayers, Conv2dIsCloseToF32) {
  manual_seed(4);
  nn::Conv2d conv(3, 8, 3, 2, 1);
  Tensor x = randn({2, 3, 10, 10}, 5);
  cpu::MinMax r = cpu::aminmax(x);
  auto q = quant::QuantizedConv2d::from_float(conv, cpu::choose_quant_params(r.min, r.max, DType::u8));
  NoGradGuard no_grad;
  EXPECT_LT(relative_error((*q)(x), conv(x)), 0.02);
}

TEST(Ptq, StaticMlpAndCnnFollowTheirF32Models) {
  for (const char* name : {"mlp", "cnn"}) {
    manual_seed(6);
    auto model = nn::make_image_classifier(nn::parse_model_kind(name));
    std::vector<Tensor> calibration = batches({8, 1, 28, 28}, 2, 7);
    for (const char* observer : {"minmax", "percentile"}) {
      auto q = quant::quantize_static(*model, calibration, {observer, 99.99});
      ASSERT_EQ(q->size(), model->size());
      EXPECT_TRUE(model->is_training()) << "the f32 model's mode is restored";
      NoGradGuard no_grad;
      Tensor x = randn({8, 1, 28, 28}, 8);
      model->eval();
      EXPECT_LT(relative_error((*q)(x), (*model)(x)), 0.05) << name << " " << observer;
      model->train();
    }
    auto q = quant::quantize_static(*model, calibration);
    int quantized = 0;
    for (size_t i = 0; i < q->size(); ++i)
      quantized += dynamic_cast<quant::QuantizedLinear*>((*q)[i].get()) || dynamic_cast<quant::QuantizedConv2d*>((*q)[i].get());
    EXPECT_EQ(quantized, std::string(name) == "mlp" ? 3 : 4);
  }
}

TEST(Ptq, CalibrationSetsTheInputRangeOfEachLayer) {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(3, 2));
  Tensor x = Tensor::from_vector<float>({-1, 2, 0.5f, 3, 1, 1, 1, 1}, {2, 4});
  auto q = quant::quantize_static(*model, {x});
  auto* first = dynamic_cast<quant::QuantizedLinear*>((*q)[0].get());
  auto* second = dynamic_cast<quant::QuantizedLinear*>((*q)[2].get());
  ASSERT_TRUE(first && second);
  EXPECT_FLOAT_EQ(first->input.scale, 4.0f / 255);  // [-1, 3]
  EXPECT_EQ(first->input.zero_point, 64);
  EXPECT_EQ(second->input.zero_point, 0);  // after a ReLU
}

TEST(Ptq, DynamicAndInt4ReplaceOnlyLinearLayers) {
  manual_seed(9);
  auto model = nn::make_cnn();
  auto dynamic = quant::quantize_dynamic(*model);
  auto int4 = quant::quantize_int4(*model);
  EXPECT_EQ((*dynamic)[0].get(), (*model)[0].get());  // the convolution is shared, still f32
  EXPECT_TRUE(dynamic_cast<quant::DynamicQuantizedLinear*>((*dynamic)[7].get()));
  EXPECT_TRUE(dynamic_cast<quant::Int4Linear*>((*int4)[9].get()));
  NoGradGuard no_grad;
  model->eval();
  Tensor x = randn({8, 1, 28, 28}, 10);
  Tensor expected = (*model)(x);
  EXPECT_LT(relative_error((*dynamic)(x), expected), 0.05);
  EXPECT_LT(relative_error((*int4)(x), expected), 0.2);
}

TEST(Ptq, RefusesLayersItCannotConvert) {
  nn::Sequential model(std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::quantize_dynamic(model); }), "BatchNorm2d"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::quantize_static(model, {}); }), "no calibration batches"));
}

class QuantizedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_quant_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The tensors and metadata of `from`, edited, written to `to`.
  template <typename Edit>
  std::string rewrite(const std::string& from, const std::string& to, Edit&& edit) const {
    io::SafetensorsFile f = io::load_safetensors(from);
    edit(f);
    io::save_safetensors(path(to), f.tensors, f.metadata);
    return path(to);
  }

  fs::path dir_;
};

TEST_F(QuantizedCheckpoint, RoundTripsEverySchemeExactly) {
  for (const char* name : {"mlp", "cnn"}) {
    manual_seed(11);
    auto model = nn::make_image_classifier(nn::parse_model_kind(name));
    Tensor x = randn({4, 1, 28, 28}, 12);
    const std::vector<std::pair<quant::Scheme, std::shared_ptr<nn::Sequential>>> variants = {
        {quant::Scheme::int8_static, quant::quantize_static(*model, batches({4, 1, 28, 28}, 1, 13))},
        {quant::Scheme::int8_dynamic, quant::quantize_dynamic(*model)},
        {quant::Scheme::int4_weight_only, quant::quantize_int4(*model)}};
    for (const auto& [scheme, q] : variants) {
      const std::string file = path(std::string(name) + "_" + quant::scheme_name(scheme) + ".safetensors");
      quant::save_quantized_classifier(file, *q, name, scheme, {{"weft.observer", "minmax"}});
      ASSERT_TRUE(quant::is_quantized_checkpoint(file));
      quant::QuantizedClassifier loaded = quant::load_quantized_classifier(file);
      EXPECT_EQ(loaded.model_name, name);
      EXPECT_EQ(loaded.scheme, scheme);
      EXPECT_EQ(loaded.metadata.at("weft.observer"), "minmax");
      NoGradGuard no_grad;
      model->eval();
      EXPECT_EQ((*loaded.model)(x).to_vector<float>(), (*q)(x).to_vector<float>()) << name << " " << quant::scheme_name(scheme);
    }
  }
  io::save_safetensors(path("plain.safetensors"), {{"w", Tensor::zeros({2})}});
  EXPECT_FALSE(quant::is_quantized_checkpoint(path("plain.safetensors")));
}

TEST_F(QuantizedCheckpoint, EveryDefectIsAFormatErrorNamingIt) {
  manual_seed(14);
  auto model = nn::make_mlp();
  const std::string good = path("good.safetensors");
  quant::save_quantized_classifier(good, *quant::quantize_static(*model, batches({8, 1, 28, 28}, 1, 15)), "mlp",
                                   quant::Scheme::int8_static);
  auto drop = [](const std::string& name) {
    return [name](io::SafetensorsFile& f) {
      std::erase_if(f.tensors, [&](const auto& entry) { return entry.first == name; });
    };
  };
  auto replace = [](const std::string& name, Tensor t) {
    return [name, t](io::SafetensorsFile& f) {
      for (auto& entry : f.tensors)
        if (entry.first == name) entry.second = t;
    };
  };
  auto load = [](const std::string& file) { return message_of<FormatError>([&] { quant::load_quantized_classifier(file); }); };

  std::string m = load(rewrite(good, "no_scale.safetensors", drop("3.weight_scale")));
  EXPECT_TRUE(contains(m, "no_scale.safetensors") && contains(m, "'3.weight_scale'") && contains(m, "weft quantize")) << m;
  m = load(rewrite(good, "no_input_scale.safetensors", drop("1.input_scale")));
  EXPECT_TRUE(contains(m, "'1.input_scale'")) << m;
  m = load(rewrite(good, "f32_weight.safetensors", replace("5.weight", Tensor::zeros({10, 256}))));
  EXPECT_TRUE(contains(m, "'5.weight'") && contains(m, "is f32 [10, 256], expected i8 [10, 256]")) << m;
  m = load(rewrite(good, "short_scale.safetensors", replace("1.weight_scale", Tensor::ones({511}))));
  EXPECT_TRUE(contains(m, "f32 [511], expected f32 [512]")) << m;
  m = load(rewrite(good, "zero_scale.safetensors", replace("3.weight_scale", Tensor::zeros({256}))));
  EXPECT_TRUE(contains(m, "positive")) << m;
  m = load(rewrite(good, "bad_zero_point.safetensors", replace("1.input_zero_point", Tensor::scalar(300, DType::i32))));
  EXPECT_TRUE(contains(m, "zero point 300")) << m;
  m = load(rewrite(good, "extra.safetensors", [](io::SafetensorsFile& f) { f.tensors.emplace_back("7.weight", Tensor::ones({1})); }));
  EXPECT_TRUE(contains(m, "unexpected tensors '7.weight'")) << m;
  m = load(rewrite(good, "unknown_scheme.safetensors", [](io::SafetensorsFile& f) { f.metadata["weft.quantization"] = "int3"; }));
  EXPECT_TRUE(contains(m, "int3")) << m;
  m = load(rewrite(good, "no_model.safetensors", [](io::SafetensorsFile& f) { f.metadata.erase("weft.model"); }));
  EXPECT_TRUE(contains(m, "weft.model")) << m;
  m = load(rewrite(good, "no_group.safetensors", [](io::SafetensorsFile& f) { f.metadata["weft.quantization"] = "int4-weight-only"; }));
  EXPECT_TRUE(contains(m, "weft.int4_group_size")) << m;
  m = load(rewrite(good, "not_quantized.safetensors", [](io::SafetensorsFile& f) { f.metadata.erase("weft.quantization"); }));
  EXPECT_TRUE(contains(m, "not a quantized checkpoint")) << m;
}

}  // namespace
}  // namespace weft
