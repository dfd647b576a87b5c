// Loading for inference: every kind of checkpoint weft writes comes back as a model that gives the
// original's outputs, with what it is; older checkpoints load with a stated assumption; broken
// files fail with the error that names the fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "foreign_safetensors.h"
#include "temp_dir.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft/quant/checkpoint.h"
#include "weft/quant/ptq.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::message_of;

const std::vector<std::string> kFashionLabels = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
const std::vector<std::string> kDigits = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

// Random u8 images [n, 28, 28], as an IDX file holds them.
Tensor random_pixels(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Tensor pixels = Tensor::empty({n, 28, 28}, DType::u8);
  for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<uint8_t>()[i] = static_cast<uint8_t>(gen.next_u64());
  return pixels;
}

void expect_same(const Tensor& got, const Tensor& expected) {
  ASSERT_EQ(got.shape(), expected.shape());
  ASSERT_EQ(got.dtype(), expected.dtype());
  EXPECT_EQ(got.to_vector<float>(), expected.to_vector<float>());
}

// What weft train's save_checkpoint writes into model.safetensors, with `extra` metadata.
void save_model(const std::string& file, const nn::Module& model, std::map<std::string, std::string> metadata) {
  nn::StateDict state = model.state_dict();
  metadata["format"] = "pt";
  io::save_safetensors(file, {state.begin(), state.end()}, metadata);
}

std::map<std::string, std::string> classifier(const std::string& kind, const std::string& dataset) {
  std::map<std::string, std::string> metadata = infer::classifier_metadata(dataset);
  metadata["weft.model"] = kind;
  return metadata;
}

class LoadTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  testing::TempDir dir_;
  NoGradGuard no_grad_;
};

TEST_F(LoadTest, F32ClassifiersFromACheckpointDirectory) {
  for (const std::string kind : {"mlp", "cnn"}) {
    manual_seed(3);
    auto model = nn::make_image_classifier(nn::parse_model_kind(kind));
    model->eval();
    fs::create_directories(path(kind));
    save_model(path(kind + "/model.safetensors"), *model, classifier(kind, "fashion-mnist"));

    infer::LoadedModel loaded = infer::load_model(path(kind));
    EXPECT_EQ(nn::model_kind_name(loaded.kind), kind);
    EXPECT_EQ(loaded.input_shape, (Shape{1, 28, 28}));
    EXPECT_EQ(loaded.labels, kFashionLabels);
    EXPECT_EQ(loaded.dtype, DType::f32);
    EXPECT_EQ(loaded.scheme, "none");
    EXPECT_EQ(loaded.dataset, "fashion-mnist");
    EXPECT_EQ(loaded.normalization.mean, data::kFashionMnistNormalization.mean);
    EXPECT_EQ(loaded.normalization.std, data::kFashionMnistNormalization.std);
    EXPECT_EQ(loaded.note, "") << "the normalisation was saved";
    EXPECT_EQ(loaded.file, path(kind + "/model.safetensors"));
    EXPECT_FALSE(loaded.model->is_training());
    EXPECT_EQ(loaded.gpt, nullptr);
    EXPECT_EQ(loaded.tokenizer, nullptr);

    Tensor input = infer::classifier_input(loaded, random_pixels(4, 1));
    expect_same((*loaded.model)(input), (*model)(input));
  }
}

TEST_F(LoadTest, Bf16ClassifierKeepsItsDtype) {
  manual_seed(4);
  auto model = nn::make_cnn();
  model->to(DType::bf16);
  model->eval();
  save_model(path("bf16.safetensors"), *model, classifier("cnn", "mnist"));

  infer::LoadedModel loaded = infer::load_model(path("bf16.safetensors"));
  EXPECT_EQ(loaded.kind, nn::ModelKind::cnn);
  EXPECT_EQ(loaded.dtype, DType::bf16);
  EXPECT_EQ(loaded.labels, kDigits);
  for (const auto& [name, t] : loaded.model->state_dict()) EXPECT_EQ(t.dtype(), DType::bf16) << name;
  Tensor input = infer::classifier_input(loaded, random_pixels(3, 2));
  EXPECT_EQ(input.dtype(), DType::bf16) << "the input comes in the weights' dtype";
  expect_same((*loaded.model)(input), (*model)(input));
}

// weft eval read PyTorch's f64 (and f16) checkpoints of its models before it evaluated bf16 ones
// through autocast; they load in f32, the dtype weft computes them in, and give the f32 model's outputs.
TEST_F(LoadTest, ForeignF64AndF16ClassifiersLoadInF32) {
  manual_seed(5);
  auto model = nn::make_mlp();
  model->eval();
  for (const auto& [dtype, code] : {std::pair(DType::f64, "F64"), std::pair(DType::f16, "F16")}) {
    const std::string file = path(std::string(code) + ".safetensors");
    testing::save_foreign_safetensors(file, model->state_dict(), dtype, code);
    infer::LoadedModel loaded = infer::load_model(file, {.model = nn::ModelKind::mlp});
    EXPECT_EQ(loaded.dtype, DType::f32) << code;
    for (const auto& [name, t] : loaded.model->state_dict()) EXPECT_EQ(t.dtype(), DType::f32) << code << " " << name;
    Tensor input = infer::classifier_input(loaded, random_pixels(2, 3));
    EXPECT_EQ(input.dtype(), DType::f32);
    if (dtype == DType::f64) expect_same((*loaded.model)(input), (*model)(input));  // f32 -> f64 -> f32 is exact
  }
}

TEST_F(LoadTest, QuantizedClassifiersCarryTheirSchemeAndNormalisation) {
  manual_seed(5);
  auto mlp = nn::make_mlp(), cnn = nn::make_cnn();
  const std::vector<Tensor> calibration = {Tensor::randn({8, 1, 28, 28}, default_generator())};
  struct Case {
    std::string kind;
    std::shared_ptr<nn::Sequential> quantized;
    quant::Scheme scheme;
  };
  const Case cases[] = {{"cnn", quant::quantize_static(*cnn, calibration), quant::Scheme::int8_static},
                        {"mlp", quant::quantize_dynamic(*mlp), quant::Scheme::int8_dynamic},
                        {"mlp", quant::quantize_int4(*mlp, 16), quant::Scheme::int4_weight_only}};
  for (const Case& c : cases) {
    const std::string file = path(std::string(quant::scheme_name(c.scheme)) + ".safetensors");
    quant::save_quantized_classifier(file, *c.quantized, c.kind, c.scheme, infer::classifier_metadata("mnist"));
    infer::LoadedModel loaded = infer::load_model(file);
    EXPECT_EQ(nn::model_kind_name(loaded.kind), c.kind);
    EXPECT_EQ(loaded.scheme, quant::scheme_name(c.scheme));
    EXPECT_EQ(loaded.dtype, DType::f32);
    EXPECT_EQ(loaded.input_shape, (Shape{1, 28, 28}));
    EXPECT_EQ(loaded.labels, kDigits);
    EXPECT_EQ(loaded.normalization.mean, data::kMnistNormalization.mean);
    EXPECT_EQ(loaded.note, "");
    EXPECT_FALSE(loaded.model->is_training());
    c.quantized->eval();
    Tensor input = infer::classifier_input(loaded, random_pixels(5, 3));
    expect_same((*loaded.model)(input), (*c.quantized)(input));
  }
}

nn::GPTConfig tiny_gpt(int64_t vocab) { return {.layers = 2, .heads = 2, .dim = 16, .context = 12, .vocab = vocab}; }

TEST_F(LoadTest, GPTWithByteTokenizer) {
  manual_seed(6);
  nn::GPT model(tiny_gpt(256));
  model.eval();
  fs::create_directories(path("gpt"));
  std::map<std::string, std::string> metadata = infer::gpt_metadata(model.config, data::ByteTokenizer());
  metadata["weft.model"] = "gpt";
  save_model(path("gpt/model.safetensors"), model, metadata);

  infer::LoadedModel loaded = infer::load_model(path("gpt"));
  EXPECT_EQ(loaded.kind, nn::ModelKind::gpt);
  EXPECT_EQ(loaded.input_shape, (Shape{12}));
  EXPECT_TRUE(loaded.labels.empty());
  EXPECT_EQ(loaded.dtype, DType::f32);
  EXPECT_EQ(loaded.scheme, "none");
  ASSERT_NE(loaded.gpt, nullptr);
  EXPECT_EQ(loaded.model, loaded.gpt);
  EXPECT_EQ(loaded.gpt->config.dim, 16);
  EXPECT_EQ(loaded.tokenizer->identity(), "byte");
  EXPECT_FALSE(loaded.model->is_training());
  std::vector<int32_t> ids = loaded.tokenizer->encode("the cat");
  Tensor tokens = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, std::ssize(ids)});
  expect_same((*loaded.model)(tokens), model(tokens));
  EXPECT_THROW(infer::classifier_input(loaded, random_pixels(1, 0)), ValueError);
}

TEST_F(LoadTest, GPTWithSentencePieceTokenizerSavedBesideIt) {
  std::vector<std::string> documents;
  for (int i = 0; i < 200; ++i) documents.push_back("the cat sat on the mat " + std::to_string(i) + "\n");
  data::SentencePieceTokenizer tokenizer = data::train_sentencepiece(documents, {.model_type = "bpe", .vocab_size = 300});
  manual_seed(7);
  nn::GPT model(tiny_gpt(300));
  model.eval();
  const std::string dir = path("pieces");
  fs::create_directories(dir);
  std::map<std::string, std::string> metadata = infer::gpt_metadata(model.config, tokenizer);
  metadata["weft.model"] = "gpt";
  save_model(dir + "/model.safetensors", model, metadata);
  infer::save_tokenizer(tokenizer, dir);

  infer::LoadedModel loaded = infer::load_model(dir + "/model.safetensors");
  EXPECT_EQ(loaded.kind, nn::ModelKind::gpt);
  EXPECT_EQ(loaded.tokenizer->identity(), tokenizer.identity());
  std::vector<int32_t> ids = loaded.tokenizer->encode("the cat sat");
  EXPECT_EQ(ids, tokenizer.encode("the cat sat"));
  Tensor tokens = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, std::ssize(ids)});
  expect_same((*loaded.model)(tokens), model(tokens));

  std::string message = message_of<ValueError>([&] { infer::load_model(dir, {.tokenizer = "byte"}); });
  EXPECT_TRUE(contains(message, "tokenizer byte (byte) does not match the checkpoint")) << message;
  fs::remove(dir + "/tokenizer.model");
  message = message_of<IOError>([&] { infer::load_model(dir); });
  EXPECT_TRUE(contains(message, "tokenizer.model is missing")) << message;
}

TEST_F(LoadTest, OldCheckpointWithoutNormalisationFallsBackAndSaysSo) {
  auto model = nn::make_mlp();
  save_model(path("old.safetensors"), *model, {{"weft.model", "mlp"}});
  infer::LoadedModel loaded = infer::load_model(path("old.safetensors"));
  EXPECT_EQ(loaded.dataset, "fashion-mnist");
  EXPECT_EQ(loaded.normalization.mean, data::kFashionMnistNormalization.mean);
  EXPECT_EQ(loaded.labels, kFashionLabels);
  EXPECT_TRUE(contains(loaded.note, "has no saved normalisation")) << loaded.note;
  EXPECT_TRUE(contains(loaded.note, "using fashion-mnist's")) << loaded.note;

  loaded = infer::load_model(path("old.safetensors"), {.dataset = "mnist"});
  EXPECT_EQ(loaded.normalization.mean, data::kMnistNormalization.mean);
  EXPECT_TRUE(contains(loaded.note, "using mnist's")) << loaded.note;

  save_model(path("anonymous.safetensors"), *model, {});
  EXPECT_TRUE(contains(message_of<ValueError>([&] { infer::load_model(path("anonymous.safetensors")); }), "--model mlp|cnn"));
  EXPECT_EQ(infer::load_model(path("anonymous.safetensors"), {.model = nn::ModelKind::mlp}).kind, nn::ModelKind::mlp);
}

TEST_F(LoadTest, ClassifierInputMatchesTheDatasetsNormalisation) {
  save_model(path("m.safetensors"), *nn::make_mlp(), classifier("mlp", "fashion-mnist"));
  infer::LoadedModel loaded = infer::load_model(path("m.safetensors"));
  Tensor pixels = random_pixels(6, 9);
  Tensor labels = Tensor::zeros({6}, DType::i64);
  data::ImageDataset dataset(pixels.view({6, 1, 28, 28}), labels, data::kFashionMnistNormalization);
  Tensor expected = dataset.get_batch({0, 1, 2, 3, 4, 5}).inputs;
  expect_same(infer::classifier_input(loaded, pixels), expected);
  expect_same(infer::classifier_input(loaded, pixels.view({6, 1, 28, 28})), expected);
  expect_same(infer::classifier_input(loaded, pixels.select(0, 2)), dataset.get_batch({2}).inputs);
  EXPECT_NEAR(infer::classifier_input(loaded, Tensor::zeros({28, 28}, DType::u8)).at({0, 0, 0, 0}),
              -0.2860 / 0.3530, 1e-6);
  EXPECT_THROW(infer::classifier_input(loaded, Tensor::zeros({2, 28, 27}, DType::u8)), ShapeError);
  EXPECT_THROW(infer::classifier_input(loaded, Tensor::zeros({28, 28}, DType::f32)), DTypeError);
}

TEST_F(LoadTest, BrokenFilesFailNamingTheFault) {
  std::string message = message_of<IOError>([&] { infer::load_model(path("missing.safetensors")); });
  EXPECT_TRUE(contains(message, "missing.safetensors")) << message;

  std::ofstream(path("text.safetensors")) << "this is not a safetensors file at all";
  EXPECT_THROW(infer::load_model(path("text.safetensors")), FormatError);

  save_model(path("whole.safetensors"), *nn::make_mlp(), classifier("mlp", "fashion-mnist"));
  fs::copy_file(path("whole.safetensors"), path("cut.safetensors"));
  fs::resize_file(path("cut.safetensors"), fs::file_size(path("whole.safetensors")) / 2);
  message = message_of<FormatError>([&] { infer::load_model(path("cut.safetensors")); });
  EXPECT_TRUE(contains(message, "cut.safetensors")) << message;

  save_model(path("resnet.safetensors"), *nn::make_mlp(), {{"weft.model", "resnet"}});
  message = message_of<FormatError>([&] { infer::load_model(path("resnet.safetensors")); });
  EXPECT_TRUE(contains(message, "weft.model is 'resnet'; expected mlp, cnn or gpt")) << message;

  save_model(path("cnn_named_mlp.safetensors"), *nn::make_cnn(), {{"weft.model", "mlp"}});
  message = message_of<FormatError>([&] { infer::load_model(path("cnn_named_mlp.safetensors")); });
  EXPECT_TRUE(contains(message, "do not fit a mlp")) << message;
  message = message_of<ValueError>([&] { infer::load_model(path("cnn_named_mlp.safetensors"), {.model = nn::ModelKind::cnn}); });
  EXPECT_TRUE(contains(message, "holds a mlp model, not cnn")) << message;

  std::map<std::string, std::string> bad = classifier("mlp", "fashion-mnist");
  bad["weft.normalization"] = R"({"mean": [0.5]})";
  save_model(path("bad_norm.safetensors"), *nn::make_mlp(), bad);
  message = message_of<FormatError>([&] { infer::load_model(path("bad_norm.safetensors")); });
  EXPECT_TRUE(contains(message, "weft.normalization")) << message;

  auto mixed = nn::make_mlp();
  nn::StateDict state = mixed->state_dict();
  std::vector<std::pair<std::string, Tensor>> tensors(state.begin(), state.end());
  tensors[0].second = tensors[0].second.to(DType::bf16);
  io::save_safetensors(path("mixed.safetensors"), tensors, {{"weft.model", "mlp"}});
  message = message_of<FormatError>([&] { infer::load_model(path("mixed.safetensors")); });
  EXPECT_TRUE(contains(message, "expected every floating weight in one dtype")) << message;

  nn::GPT gpt(tiny_gpt(256));
  save_model(path("gpt_no_config.safetensors"), gpt, {{"weft.model", "gpt"}});
  message = message_of<FormatError>([&] { infer::load_model(path("gpt_no_config.safetensors")); });
  EXPECT_TRUE(contains(message, "weft.gpt")) << message;
}

// A GPT's config is read field by field and checked against the tensors in the same file before
// any model is built: a layer count of a billion is refused at once (it used to allocate until
// std::bad_alloc), as is a config that does not describe the weights beside it.
TEST_F(LoadTest, GPTMetadataIsCheckedFieldByFieldAndAgainstTheTensors) {
  nn::GPT gpt(tiny_gpt(256));
  const nlohmann::json good = nlohmann::json::parse(infer::gpt_metadata(gpt.config, data::ByteTokenizer()).at("weft.gpt"));
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"layers", 1000000000, "\"layers\" must be an integer in [1, 1024], found 1000000000"},
      {"layers", 1024, "parameters (1024 layers, dim 16, context 12, vocab 256) but the file holds 10880"},
      {"layers", 3, "of 14160 parameters (3 layers, dim 16, context 12, vocab 256) but the file holds 10880"},
      {"vocab", 2147483647, "but the file holds"},
      {"layers", nlohmann::json::parse("18446744073709551616"), "\"layers\" must be an integer in [1, 1024]"},
      {"dim", nlohmann::json::parse("18446744073709551616"), "\"dim\" must be an integer in [1, 2147483647]"},
      {"layers", "2", "found \"2\""},
      {"layers", 2.5, "found 2.5"},
      {"layers", 0, "found 0"},
      {"dim", -16, "found -16"},
      {"heads", 3, "\"dim\" 16 must be a multiple of \"heads\" 3"},
      {"dropout", 1, "\"dropout\" must be a number in [0, "},
      {"context", nullptr, "found null"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = good;
    config[c.field] = c.value;
    save_model(path("bad_gpt.safetensors"), gpt,
               {{"weft.model", "gpt"}, {"weft.gpt", config.dump()}, {"weft.tokenizer", "byte"}});
    std::string message = message_of<FormatError>([&] { infer::load_model(path("bad_gpt.safetensors")); });
    EXPECT_TRUE(contains(message, path("bad_gpt.safetensors") + ": weft.gpt") && contains(message, c.says))
        << c.field << ": " << message;
  }
  for (const std::string& text : {std::string(100000, '[') + std::string(100000, ']'), std::string("{\"layers\": 2")}) {
    save_model(path("bad_gpt.safetensors"), gpt, {{"weft.model", "gpt"}, {"weft.gpt", text}, {"weft.tokenizer", "byte"}});
    std::string message = message_of<FormatError>([&] { infer::load_model(path("bad_gpt.safetensors")); });
    EXPECT_TRUE(contains(message, path("bad_gpt.safetensors") + ": weft.gpt")) << message;
  }
  save_model(path("bad_gpt.safetensors"), gpt, {{"weft.model", "gpt"}, {"weft.gpt", good.dump()}});
  std::string message = message_of<FormatError>([&] { infer::load_model(path("bad_gpt.safetensors")); });
  EXPECT_TRUE(contains(message, "no weft.tokenizer in its metadata")) << message;
}

TEST(GPTConfig, CountsTheParametersOfTheModelItDescribes) {
  for (const nn::GPTConfig& c : {nn::GPTConfig{.layers = 1, .heads = 1, .dim = 4, .context = 3, .vocab = 5},
                                 nn::GPTConfig{.layers = 3, .heads = 2, .dim = 8, .context = 16, .vocab = 300}})
    EXPECT_EQ(c.num_parameters(), nn::GPT(c).num_parameters());
  EXPECT_EQ((nn::GPTConfig{.layers = INT32_MAX, .heads = 1, .dim = INT32_MAX}).num_parameters(), INT64_MAX);
}

// Normalisation statistics are numbers, finite, one per channel.
TEST_F(LoadTest, NormalisationMetadataIsCheckedFieldByField) {
  for (const char* bad : {R"({"mean": [0.5], "std": ["0.2"]})", R"({"mean": [1e39], "std": [0.2]})",
                          R"({"mean": 0.5, "std": [0.2]})", R"({"mean": [0.5], "std": [0.2], "std": [0.3]})",
                          R"({"mean": [0.5], "std": [0]})", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}) {
    std::map<std::string, std::string> metadata = classifier("mlp", "fashion-mnist");
    metadata["weft.normalization"] = bad;
    save_model(path("bad_norm.safetensors"), *nn::make_mlp(), metadata);
    std::string message = message_of<FormatError>([&] { infer::load_model(path("bad_norm.safetensors")); });
    EXPECT_TRUE(contains(message, path("bad_norm.safetensors") + ": weft.normalization")) << bad << ": " << message;
  }
}

}  // namespace
}  // namespace weft
