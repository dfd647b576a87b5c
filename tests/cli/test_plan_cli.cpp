// `weft plan` as a user meets it: the table, the JSON line, the textbook figures, and exit status 2
// with one clear line for every impossible plan.
#include <gtest/gtest.h>


#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "weft_cli.h"

namespace weft {
namespace {

using testing::contains;
using testing::Outcome;
using testing::weft_cli;

// The JSON object on the last line of `weft plan ... --json`.
nlohmann::json plan_json(const std::string& args) {
  Outcome o = weft_cli("plan --json " + args);
  EXPECT_EQ(o.status, 0) << o.output;
  return testing::last_line_json(o.output);
}

void expect_usage_error(const std::string& args, const std::string& says) {
  SCOPED_TRACE(args);
  testing::expect_usage_error(weft_cli("plan " + args), says);
}

TEST(PlanCliTest, JsonHasTheBreakdownFitAndStrategy) {
  nlohmann::json j = plan_json("--model cnn --device cpu");
  for (const char* key : {"params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes", "fits",
                          "strategy"})
    EXPECT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
  EXPECT_EQ(j["params"], 225034);
  EXPECT_EQ(j["batch"], 128);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["strategy"], "Single CPU, FP32");
  EXPECT_GT(j["activations_bytes"].get<int64_t>(), j["params_bytes"].get<int64_t>());
  EXPECT_LE(j["total_bytes"].get<int64_t>(), j["params_bytes"].get<int64_t>() + j["grads_bytes"].get<int64_t>() +
                                                 j["optimizer_bytes"].get<int64_t>() +
                                                 j["activations_bytes"].get<int64_t>());
}

// GPT-2 small (its vocabulary padded to a multiple of 64, as nanoGPT pads it) on 8 devices: 2 data-
// parallel replicas of 2 stages x 2 tensor-parallel ranks. A row per stage in the JSON, and
// the rows above them the larger stage's.
TEST(PlanCliTest, SplitPlansHaveAStageEach) {
  nlohmann::json j = plan_json("--model gpt --layers 12 --heads 12 --dim 768 --context 1024 --vocab 50304 --tp 2 --pp 2 --world 8 --batch 16 --grad-accum 4");
  EXPECT_EQ(j["data_parallel"], 2);
  ASSERT_EQ(j["stages"].size(), 2u);
  int64_t largest = 0;
  for (const auto& stage : j["stages"]) largest = std::max(largest, stage["total_bytes"].get<int64_t>());
  EXPECT_EQ(j["total_bytes"].get<int64_t>(), largest);
  EXPECT_EQ(j["stages"][0]["in_flight"], 2);
  EXPECT_EQ(j["stages"][1]["in_flight"], 1);
  EXPECT_EQ(j["ddp_bucket_bytes"], 0);  // pipeline replicas average their gradients in place
  EXPECT_GT(plan_json("--model gpt --layers 12 --heads 12 --dim 768 --context 1024 --vocab 50304 --tp 2 --world 4 --batch 8")["ddp_bucket_bytes"].get<int64_t>(), 0);
}

TEST(PlanCliTest, TextbookCases) {
  EXPECT_EQ(plan_json("--params 1e9")["params_bytes"], 4'000'000'000);
  nlohmann::json llama = plan_json("--params 70e9 --precision fp16");
  EXPECT_EQ(llama["params_bytes"], 140'000'000'000);
  EXPECT_EQ(llama["bytes_per_param"]["optimizer"], 12);
  EXPECT_FALSE(llama["fits"].get<bool>());
  EXPECT_EQ(llama["fits_with"]["zero"], 3);
  EXPECT_EQ(llama["strategy"], "FSDP (8+ GPUs), BF16, gradient checkpointing");
  nlohmann::json mixed = plan_json("--params 7B --precision bf16 --optimizer adamw");
  EXPECT_EQ(mixed["total_bytes"], 16 * int64_t{7'000'000'000}) << "16 bytes a parameter before sharding";
  nlohmann::json sharded = plan_json("--params 7B --precision bf16 --zero 3 --world 8 --batch 8");
  EXPECT_EQ(sharded["total_bytes"], 2 * int64_t{7'000'000'000}) << "ZeRO-3 over 8 divides all of it by 8";
}

TEST(PlanCliTest, TableShowsDecimalAndBinaryUnitsAndTheDevice) {
  Outcome o = weft_cli("plan --params 1e9 --device A100-40GB");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "4,000,000,000")) << o.output;
  EXPECT_TRUE(contains(o.output, "4.00 GB")) << o.output;
  EXPECT_TRUE(contains(o.output, "3.73 GiB")) << o.output;
  EXPECT_TRUE(contains(o.output, "A100-40GB: 40.0 GB")) << o.output;
  EXPECT_TRUE(contains(o.output, "fits: yes")) << o.output;
  EXPECT_TRUE(contains(o.output, "Single GPU, mixed precision")) << o.output;  // 4 GB of fp32 weights
}

TEST(PlanCliTest, GptFlagsDescribeTheGptFamily) {
  nlohmann::json small = plan_json("--layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --batch 8");
  EXPECT_EQ(small["params"], 124'439'808);
  EXPECT_EQ(plan_json("--model gpt2 --batch 8")["total_bytes"], small["total_bytes"]) << "--model gpt2 is GPT-2 small";
  nlohmann::json checkpointed = plan_json("--model gpt2 --batch 8 --checkpoint-activations");
  EXPECT_LT(checkpointed["activations_bytes"].get<int64_t>(), small["activations_bytes"].get<int64_t>());
  EXPECT_EQ(plan_json("--model gpt --dim 1024 --layers 24 --heads 16 --context 1024 --vocab 50257")["params"],
            354'823'168);
}

// `--model gpt` is the model `weft train --model gpt` builds, flag for flag: the parameters train
// reports for the same flags, with the defaults train uses (and --help shows).
TEST(PlanCliTest, GptIsTheModelTrainBuilds) {
  auto trained_parameters = [](const std::string& flags) {
    Outcome o = weft_cli("train --model gpt --data random --steps 1 --batch-size 2 --threads 1 --json " + flags);
    EXPECT_EQ(o.status, 0) << o.output;
    return testing::last_line_json(o.output)["params"];
  };
  EXPECT_EQ(plan_json("--model gpt")["params"], 842'496);
  EXPECT_EQ(plan_json("--model gpt")["params"], trained_parameters(""));
  EXPECT_EQ(plan_json("--model gpt --layers 2 --heads 2 --dim 32 --context 16 --vocab 300")["params"],
            trained_parameters("--layers 2 --heads 2 --dim 32 --context 16 --vocab 300"));
  Outcome train_help = weft_cli("train --help"), plan_help = weft_cli("plan --help");
  for (const char* flag : {"--layers", "--heads", "--dim", "--context"})
    EXPECT_EQ(testing::help_default(plan_help.output, flag), testing::help_default(train_help.output, flag)) << flag;
  expect_usage_error("--model gpt2 --layers 2", "--model gpt2 is fixed");
}

TEST(PlanCliTest, HelpStatesTheConvention) {
  Outcome o = weft_cli("plan --help");
  EXPECT_EQ(o.status, 0);
  EXPECT_TRUE(contains(o.output, "2 + 2 + Adam 12 (master, m, v) = 16")) << o.output;
  EXPECT_TRUE(contains(o.output, "A100-40GB|A100-80GB|H100|H200|RTX4090|cpu")) << o.output;
}

TEST(PlanCliTest, ImpossiblePlansExitTwoWithOneLine) {
  expect_usage_error("--model cnn --batch-size 0", "--batch-size: must be a whole number from 1 to 1073741824, got '0'");
  expect_usage_error("--model cnn --batch-size -3", "--batch-size: must be a whole number from 1 to 1073741824, got '-3'");
  expect_usage_error("--model cnn --gpus 0", "--gpus: must be a whole number from 1 to 1048576, got '0'");
  expect_usage_error("--model cnn --gpus 3 --batch-size 128", "--gpus: must divide --batch-size (128) so that data parallelism gives each device batch / world samples, got '3'");
  expect_usage_error("--model cnn --zero 4", "--zero: must be a whole number from 0 to 3, got '4'");
  expect_usage_error("--model cnn --zero -1", "--zero: must be a whole number from 0 to 3");
  expect_usage_error("--model cnn --tp 2 --world 2", "tensor and pipeline parallelism split a GPT");
  expect_usage_error("--model gpt2 --tp 5 --world 5", "--tp 5: the GPT's 12 heads");
  expect_usage_error("--model gpt --pp 5 --world 5 --grad-accum 5", "--layers must be at least --pp");
  expect_usage_error("--model gpt --pp 4 --world 4", "--grad-accum: 1F1B over 4 stages needs at least 4 micro-batches");
  expect_usage_error("--model gpt --tp 2 --pp 2 --world 6", "--gpus: must be a multiple of --tp x --pp (4)");
  expect_usage_error("--model gpt --tp 0", "--tp: must be a whole number from 1 to 1048576, got '0'");
  expect_usage_error("--model gpt --pp 2 --world 2 --grad-accum 2 --pp-schedule zigzag", "--pp-schedule");
  expect_usage_error("--layers 12 --dim 768 --heads 5", "--heads: must divide --dim (768)");
  expect_usage_error("--layers 0", "--layers: must be a whole number from 1 to 1024, got '0'");
  expect_usage_error("--model gpt --vocab -1", "--vocab: must be a whole number from 1 to 1073741824, got '-1'");
  expect_usage_error("--params 0", "--params");
  expect_usage_error("--params -5", "--params");
  expect_usage_error("--params lots", "--params");
  expect_usage_error("--model mlp --params 1e6", "describe the model twice");
  expect_usage_error("--params 1e6 --layers 2", "describe the model twice");
  expect_usage_error("--model cnn --layers 2", "--model cnn is fixed");
  expect_usage_error("--model resnet", "resnet");
  expect_usage_error("--model cnn --device TPU", "A100-40GB|A100-80GB|H100|H200|RTX4090|cpu");
  expect_usage_error("--model cnn --precision int3", "bf16-pure");
  expect_usage_error("--model cnn --optimizer lion", "momentum");
  expect_usage_error("", "no model");
}

// "Does a 4-bit 70B model serve batch 8 at context 4096 on one 80 GB card", with Llama 2 70B's
// shape (64 heads sharing 8 KV heads): yes, and the table shows the cache's arithmetic.
TEST(PlanCliTest, InferenceAnswersWhetherAQuantizedModelServes) {
  const std::string llama = "--inference --layers 80 --dim 8192 --heads 64 --vocab 32000 --context 4096 --batch 8 "
                            "--precision int4 --device H100";
  Outcome o = weft_cli("plan " + llama + " --kv-heads 8");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "2 x 80 layers x 8 KV heads x 128 x 4096 positions x 8 x 2 B")) << o.output;
  EXPECT_TRUE(contains(o.output, "10,737,418,240")) << o.output;
  EXPECT_TRUE(contains(o.output, "fits: yes")) << o.output;
  nlohmann::json j = plan_json(llama);  // a KV head per head: 86 GB of cache alone
  EXPECT_EQ(j["kv_cache_bytes"], int64_t{85'899'345'920});
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_EQ(j["kv_precision"], "fp16");
  EXPECT_LT(j["max_batch"].get<int64_t>(), 8);
  nlohmann::json count = plan_json("--inference --params 70B --precision int4");
  EXPECT_EQ(count["weights_bytes"], int64_t{43'750'000'000}) << "5 bits a weight";
  EXPECT_FALSE(count["kv_known"].get<bool>());
  nlohmann::json gpt2 = plan_json("--inference --model gpt2 --batch 4 --kv-precision fp32");
  EXPECT_EQ(gpt2["kv_bytes_per_sequence"], int64_t{2} * 12 * 768 * 1024 * 4);
}

TEST(PlanCliTest, TrainingAndServingFlagsDoNotMix) {
  expect_usage_error("--model gpt --inference --zero 2", "--zero: plans training, not with --inference");
  expect_usage_error("--model gpt --inference --gpus 2", "--gpus: plans training, not with --inference");
  expect_usage_error("--model gpt --inference --checkpoint-activations", "--checkpoint-activations: plans training");
  expect_usage_error("--model gpt --kv-heads 2", "--kv-heads: plans serving: add --inference");
  expect_usage_error("--model gpt --precision int4", "bf16-pure");
  expect_usage_error("--model gpt --inference --precision bf16-pure", "under --inference one of fp32, fp16, bf16, int8, int4");
  expect_usage_error("--model cnn --inference", "not a language model");
  expect_usage_error("--model gpt --inference --kv-heads 3", "--kv-heads: must divide the 4 heads");
  expect_usage_error("--params 7B --inference --kv-heads 2", "the KV cache needs the architecture");
}

// Sizes no machine trains are refused at once, with the bound and the text typed: a billion layers
// took 31 s and 12.6 GB before an internal error, and a huge --grad-accum wrapped to '-8' in the
// default batch's product.
TEST(PlanCliTest, AbsurdSizesAreRefusedAtOnceAsTyped) {
  expect_usage_error("--layers 2147483647", "--layers: must be a whole number from 1 to 1024, got '2147483647'");
  expect_usage_error("--model gpt --grad-accum 9223372036854775807",
                     "--grad-accum: must be a whole number from 1 to 1073741824, got '9223372036854775807'");
  expect_usage_error("--model gpt --grad-accum 99999999999999999999",
                     "--grad-accum: must be a whole number from 1 to 1073741824, got '99999999999999999999'");
  expect_usage_error("--model gpt --grad-accum 1073741824 --gpus 1048576",
                     "plan: the default batch, 8 per device x 1048576 data-parallel replicas x 1073741824 micro-batches "
                     "(--grad-accum), is more than 1073741824; give --batch-size");
  expect_usage_error("--model gpt --gpus 2097152", "--gpus: must be a whole number from 1 to 1048576, got '2097152'");
  expect_usage_error("--model gpt --dim 2147483648", "--dim: must be a whole number from 1 to 1073741824");
  // The largest sizes taken multiply past 2^63 bytes: refused, not wrapped.
  expect_usage_error("--layers 1024 --dim 1073741824 --heads 1", "more than 2^63 bytes");
}

}  // namespace
}  // namespace weft
