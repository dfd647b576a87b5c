// The `weft` command line as a user meets it: exit status 2 and one clear line on stderr for
// every bad input, and nothing half-written.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "expect_error.h"
#include "foreign_safetensors.h"
#include "weft_cli.h"
#include "weft/core/tensor.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft/quant/checkpoint.h"
#include "weft/quant/ptq.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::expect_usage_error;
using testing::Outcome;
using testing::weft_cli;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  fs::path dir_;
};

TEST_F(CliTest, UnknownModelFlagOrSubcommandExitsTwo) {
  expect_usage_error(weft_cli("train --model resnet"), "resnet");
  expect_usage_error(weft_cli("train --no-such-flag"), "--no-such-flag");
  expect_usage_error(weft_cli("frobnicate"), "unknown command 'frobnicate' (see weft --help)");
  expect_usage_error(weft_cli("train --epochs two"), "two");
}

TEST_F(CliTest, HelpExitsZero) {
  Outcome o = weft_cli("train --help");
  EXPECT_EQ(o.status, 0);
  EXPECT_TRUE(contains(o.output, "--limit-train-batches"));
}

TEST_F(CliTest, MissingDatasetExitsTwo) {
  expect_usage_error(weft_cli("train --data-dir " + path("nowhere")), "nowhere");
}

TEST_F(CliTest, CorruptDatasetExitsTwo) {
  fs::create_directories(dir_ / "data");
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"})
    write(std::string("data/") + name, std::string("\x00\x00\x08\x03\x00\x00", 6));  // header cut short
  expect_usage_error(weft_cli("train --data-dir " + path("data")), "train-images-idx3-ubyte");
}

// Without --data-dir, Fashion-MNIST is read under WEFT_DATA_DIR when it is set.
TEST_F(CliTest, WeftDataDirMovesTheDefaultDataDirectory) {
  fs::create_directories(dir_ / "root/fashion-mnist");
  write("root/fashion-mnist/train-images-idx3-ubyte", std::string("\x00\x00\x08\x03\x00\x00", 6));
  setenv("WEFT_DATA_DIR", path("root").c_str(), 1);
  const Outcome o = weft_cli("train --model mlp --steps 1");
  unsetenv("WEFT_DATA_DIR");
  expect_usage_error(o, "in '" + path("root/fashion-mnist") + "'");  // the labels are missing there
}

TEST_F(CliTest, UnwritableOutExitsTwo) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  write("a_file", "x");
  expect_usage_error(weft_cli("train --limit-train-batches 1 --epochs 1 --out " + path("a_file/run")), "a_file");
}

TEST_F(CliTest, BadPrecisionAndMemoryOptionsExitTwo) {
  expect_usage_error(weft_cli("train --precision int8"), "--precision");
  // The choices --help lists are the ones train takes, and its refusal lists the same.
  EXPECT_TRUE(contains(weft_cli("train --help").output, "--precision {fp32|bf16|fp16}=fp32"));
  expect_usage_error(weft_cli("train --precision bf16-pure"), "--precision: must be one of fp32, bf16, fp16, got 'bf16-pure'");
  expect_usage_error(weft_cli("train --grad-accum 3"), "--grad-accum: must divide --batch-size (128, the task's default)");
  expect_usage_error(weft_cli("train --grad-accum 0"), "--grad-accum: must be a whole number from 1 to 1073741824, got '0'");
  expect_usage_error(weft_cli("train --memory-limit lots"), "lots");
}

// oneDNN caps its kernels at ONEDNN_MAX_CPU_ISA, so an AVX2 machine can be played on any CPU: it
// has no bf16 kernels there, and bf16 training widens to f32, saying so, and still learns.
TEST_F(CliTest, Bf16OnACpuWithoutAvx512WidensToF32AndSaysSo) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  const Outcome o = weft_cli("train --model cnn --precision bf16 --steps 20 --batch-size 64 --eval-every 0 --json");
  unsetenv("ONEDNN_MAX_CPU_ISA");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("note: this CPU has no AVX-512, and oneDNN no bf16 kernels without it"), std::string::npos)
      << o.output;
  EXPECT_GT(testing::last_line_json(o.output)["test_accuracy"].get<double>(), 0.5) << o.output;
}

// Smaller batches cannot help when the data itself does not fit: one line with the limit and what
// loading the data asked for.
TEST_F(CliTest, MemoryLimitBelowTheDatasetExitsTwoNamingTheTensor) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  expect_usage_error(weft_cli("train --model cnn --auto-batch --memory-limit 8MiB --limit-train-batches 1"),
                     "the memory limit of 8.00 MiB (--memory-limit) is below what the training data itself needs: "
                     "loading it could not allocate 44.86 MiB more");
}

TEST_F(CliTest, MalformedCheckpointsExitTwo) {
  write("short.safetensors", "abc");
  expect_usage_error(weft_cli("eval --checkpoint " + path("short.safetensors")), "short.safetensors");
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string length(8, '\0');
  length[0] = static_cast<char>(header.size() + 100);  // past the end of the file
  write("past_end.safetensors", length + header + std::string(8, '\0'));
  expect_usage_error(weft_cli("info " + path("past_end.safetensors")), "past_end.safetensors");
  expect_usage_error(weft_cli("info " + path("missing.safetensors")), "missing.safetensors");
}

TEST_F(CliTest, InfoPrintsTensorsAndSizePerFormat) {
  io::save_safetensors(path("m.safetensors"), {{"fc.weight", Tensor::zeros({10, 100})}, {"fc.bias", Tensor::zeros({10})}});
  Outcome o = weft_cli("info " + path("m.safetensors"));
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "fc.weight")) << o.output;
  EXPECT_TRUE(contains(o.output, "1010 parameters")) << o.output;
  EXPECT_TRUE(contains(o.output, "1010 params x 4.0 bytes = 3.95 KiB")) << o.output;
  EXPECT_TRUE(contains(o.output, "1010 params x 1.0 bytes = 1010 B")) << o.output;
  Outcome json = weft_cli("info --json " + path("m.safetensors"));
  EXPECT_TRUE(contains(json.output, "\"params\":1010")) << json.output;
}

TEST_F(CliTest, EvalWithoutModelNameAsksForIt) {
  io::save_safetensors(path("anon.safetensors"), {{"w", Tensor::zeros({2})}});
  expect_usage_error(weft_cli("eval --checkpoint " + path("anon.safetensors")), "--model");
}

// A freshly initialised model saved as `weft train` saves one.
void save_untrained(const std::string& file, const std::string& model_name) {
  auto model = nn::make_image_classifier(nn::parse_model_kind(model_name));
  nn::StateDict state = model->state_dict();
  io::save_safetensors(file, {state.begin(), state.end()}, {{"format", "pt"}, {"weft.model", model_name}});
}

// PyTorch's f64 copy of a model evaluates as the model does (it used to fail: "autocast: the
// low-precision type must be bf16 or f16, got f64").
TEST_F(CliTest, EvalOfAForeignF64CheckpointGivesTheF32ModelsAccuracy) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const nn::StateDict state = nn::make_mlp()->state_dict();
  io::save_safetensors(path("mlp.safetensors"), {state.begin(), state.end()}, {{"weft.model", "mlp"}});
  testing::save_foreign_safetensors(path("f64.safetensors"), state, DType::f64, "F64");
  Outcome f32 = weft_cli("eval --checkpoint " + path("mlp.safetensors"));
  Outcome f64 = weft_cli("eval --model mlp --checkpoint " + path("f64.safetensors"));
  ASSERT_EQ(f64.status, 0) << f64.output;
  EXPECT_TRUE(contains(f64.output, "mlp on 10000 test images: accuracy")) << f64.output;
  EXPECT_EQ(f64.output.substr(f64.output.find("mlp on")), f32.output.substr(f32.output.find("mlp on"))) << f32.output;
}

TEST_F(CliTest, QuantizePrintsTheSizeRatioAndEvalRunsTheQuantizedModel) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  save_untrained(path("mlp.safetensors"), "mlp");
  Outcome q = weft_cli("quantize " + path("mlp.safetensors") + " --int8 --calib 1 --batch-size 16 --out " + path("q.safetensors"));
  ASSERT_EQ(q.status, 0) << q.output;
  EXPECT_TRUE(contains(q.output, "int8-static")) << q.output;
  EXPECT_TRUE(contains(q.output, "x smaller")) << q.output;
  Outcome e = weft_cli("eval --checkpoint " + path("q.safetensors"));
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_TRUE(contains(e.output, "mlp (int8-static) on 10000 test images")) << e.output;
  Outcome json = weft_cli("eval --json --checkpoint " + path("q.safetensors"));
  EXPECT_TRUE(contains(json.output, "\"model\":\"mlp\",\"quantization\":\"int8-static\"")) << json.output;
  Outcome q4 = weft_cli("quantize " + path("mlp.safetensors") + " --int4 --out " + path("q4.safetensors") + " --json");
  ASSERT_EQ(q4.status, 0) << q4.output;
  EXPECT_TRUE(contains(q4.output, "\"quantization\":\"int4-weight-only\"")) << q4.output;
}

// The normalisation (and the test set's class distribution) travels with the checkpoint: train
// saves it, quantize carries it over, eval applies it; a checkpoint from before it was saved gets the data set's and a note saying so.
TEST_F(CliTest, NormalisationTravelsFromTrainThroughQuantizeToEval) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  Outcome t = weft_cli("train --model mlp --epochs 1 --limit-train-batches 2 --threads 2 --out " + path("run"));
  ASSERT_EQ(t.status, 0) << t.output;
  std::map<std::string, std::string> metadata = io::read_safetensors_header(path("run/model.safetensors")).metadata;
  EXPECT_EQ(metadata["weft.dataset"], "fashion-mnist");
  EXPECT_EQ(nlohmann::json::parse(metadata["weft.normalization"]),
            (nlohmann::json{{"mean", {0.2860f}}, {"std", {0.3530f}}}));
  Outcome q = weft_cli("quantize " + path("run") + " --int8 --calib 1 --batch-size 16 --out " + path("q.safetensors"));
  ASSERT_EQ(q.status, 0) << q.output;
  EXPECT_FALSE(contains(q.output, "no saved normalisation")) << q.output;
  EXPECT_EQ(io::read_safetensors_header(path("q.safetensors")).metadata["weft.normalization"],
            metadata["weft.normalization"]);
  // So does the test set's class distribution (the server's drift gauge compares with it):
  // Fashion-MNIST's test set has 1,000 images of each class.
  EXPECT_EQ(nlohmann::json::parse(metadata["weft.class_distribution"]), nlohmann::json(std::vector<double>(10, 0.1)));
  EXPECT_EQ(io::read_safetensors_header(path("q.safetensors")).metadata["weft.class_distribution"],
            metadata["weft.class_distribution"]);
  for (const std::string& checkpoint : {path("run"), path("q.safetensors")}) {
    Outcome e = weft_cli("eval --json --threads 2 --checkpoint " + checkpoint);
    ASSERT_EQ(e.status, 0) << e.output;
    EXPECT_FALSE(contains(e.output, "note:")) << e.output;
    EXPECT_EQ(testing::last_line_json(e.output)["assumed_normalization"], false) << e.output;
  }

  save_untrained(path("old.safetensors"), "mlp");
  Outcome e = weft_cli("eval --json --threads 2 --checkpoint " + path("old.safetensors"));
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_TRUE(contains(e.output, "note: " + path("old.safetensors") + " has no saved normalisation")) << e.output;
  EXPECT_TRUE(contains(e.output, "using fashion-mnist's training statistics")) << e.output;
  EXPECT_EQ(testing::last_line_json(e.output)["assumed_normalization"], true) << e.output;
}

// --dataset names one data set for train, eval and quantize: its files and its normalisation. No
// Debian package installs MNIST, so it reads only from a --data-dir (Fashion-MNIST's files stand
// in for MNIST's here: the same format).
TEST_F(CliTest, DatasetNamesTheFilesReadAndTheirNormalisation) {
  const std::string fashion = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(fashion)) GTEST_SKIP() << "Fashion-MNIST is not installed";
  expect_usage_error(weft_cli("train --model mlp --dataset mnist --steps 1"),
                     "--dataset mnist: needs --data-dir, the directory of its IDX files");
  Outcome t = weft_cli("train --model mlp --dataset mnist --data-dir " + fashion +
                       " --steps 1 --batch-size 8 --threads 2 --out " + path("run"));
  ASSERT_EQ(t.status, 0) << t.output;
  std::map<std::string, std::string> metadata = io::read_safetensors_header(path("run/model.safetensors")).metadata;
  EXPECT_EQ(metadata["weft.dataset"], "mnist");
  EXPECT_EQ(nlohmann::json::parse(metadata["weft.normalization"]),
            (nlohmann::json{{"mean", {0.1307f}}, {"std", {0.3081f}}}));
  expect_usage_error(weft_cli("eval --checkpoint " + path("run")), "--dataset mnist: needs --data-dir");
  expect_usage_error(weft_cli("quantize " + path("run") + " --int8 --calib 1 --out " + path("q.safetensors")),
                     "--dataset mnist: needs --data-dir");
  expect_usage_error(weft_cli("eval --dataset fashion-mnist --checkpoint " + path("run")),
                     "model.safetensors was trained on mnist (leave --dataset out to use its data set)");
  Outcome e = weft_cli("eval --json --threads 2 --data-dir " + fashion + " --checkpoint " + path("run"));
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_EQ(testing::last_line_json(e.output)["dataset"], "mnist");
  // Its --help says the same: fashion-mnist by default, read from its package's directory.
  Outcome help = weft_cli("train --help");
  EXPECT_EQ(testing::help_default(help.output, "--dataset"), "fashion-mnist");
  EXPECT_TRUE(testing::help_default(help.output, "--data-dir").starts_with(fashion)) << help.output;
}

// A bf16 checkpoint evaluates in bf16 (the f32 batches meet its layers through autocast), and
// quantize widens it back to f32 first.
TEST_F(CliTest, Bf16CheckpointEvaluatesAndQuantizes) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "Fashion-MNIST is not installed";
  auto model = nn::make_mlp();
  model->to(DType::bf16);
  nn::StateDict state = model->state_dict();
  io::save_safetensors(path("bf16.safetensors"), {state.begin(), state.end()},
                       {{"format", "pt"}, {"weft.model", "mlp"}, {"weft.dataset", "fashion-mnist"},
                        {"weft.normalization", R"({"mean": [0.286], "std": [0.353]})"}});
  Outcome e = weft_cli("eval --json --threads 2 --checkpoint " + path("bf16.safetensors"));
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_TRUE(contains(e.output, "mlp (bf16) on 10000 test images")) << e.output;
  EXPECT_EQ(testing::last_line_json(e.output)["dtype"], "bf16") << e.output;
  Outcome q = weft_cli("quantize " + path("bf16.safetensors") + " --int4 --out " + path("q4.safetensors"));
  ASSERT_EQ(q.status, 0) << q.output;
}

TEST_F(CliTest, QuantizedCheckpointWithoutAScaleExitsTwo) {
  auto model = nn::make_mlp();
  quant::save_quantized_classifier(path("q.safetensors"), *quant::quantize_static(*model, {Tensor::ones({2, 1, 28, 28})}),
                                   "mlp", quant::Scheme::int8_static);
  io::SafetensorsFile f = io::load_safetensors(path("q.safetensors"));
  std::erase_if(f.tensors, [](const auto& entry) { return entry.first == "3.weight_scale"; });
  io::save_safetensors(path("no_scale.safetensors"), f.tensors, f.metadata);
  expect_usage_error(weft_cli("eval --checkpoint " + path("no_scale.safetensors")), "'3.weight_scale'");
}

TEST_F(CliTest, QuantizeChecksItsArguments) {
  save_untrained(path("mlp.safetensors"), "mlp");
  expect_usage_error(weft_cli("quantize " + path("mlp.safetensors") + " --out " + path("q.safetensors")), "--int8");
  expect_usage_error(weft_cli("quantize " + path("mlp.safetensors") + " --int8 --int4 --out " + path("q.safetensors")),
                     "excludes");
  expect_usage_error(weft_cli("quantize " + path("missing.safetensors") + " --int8 --out " + path("q.safetensors")),
                     "missing.safetensors");
  EXPECT_FALSE(fs::exists(path("q.safetensors")));
  quant::save_quantized_classifier(path("int4.safetensors"), *quant::quantize_int4(*nn::make_mlp()), "mlp",
                                   quant::Scheme::int4_weight_only);
  expect_usage_error(weft_cli("quantize " + path("int4.safetensors") + " --int8 --out " + path("q.safetensors")),
                     "already quantized");
}

}  // namespace
}  // namespace weft
