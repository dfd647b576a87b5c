// The planner's arithmetic: textbook figures, ZeRO sharding, the strategy chart, the
// GPT family's parameter count, and the errors an impossible plan gives.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/dist/pipeline.h"
#include "weft/memory/planner.h"
#include "weft/nn/layers.h"
#include "weft/nn/models.h"

namespace weft::memory {
namespace {

using testing::contains;
using testing::message_of;

PlanRequest request(Precision precision, OptimizerKind optimizer = OptimizerKind::adam, int zero = 0, int64_t world = 1) {
  return {.batch = world, .precision = precision, .optimizer = optimizer, .zero = zero, .world = world,
          .checkpoint_activations = false, .device = "H100"};
}

TEST(PlannerTest, OneBillionParametersInFp32Take4GB) {
  Plan plan = make_plan(ModelDescription::parameters_only(1'000'000'000), request(Precision::fp32));
  EXPECT_EQ(plan.params_bytes, 4'000'000'000);
  EXPECT_EQ(format_decimal_bytes(plan.params_bytes), "4.00 GB");
}

TEST(PlannerTest, Llama70BInF16Takes140GB) {
  Plan plan = make_plan(ModelDescription::parameters_only(parse_parameter_count("70e9")), request(Precision::fp16));
  EXPECT_EQ(plan.params_bytes, 140'000'000'000);
  EXPECT_EQ(format_decimal_bytes(plan.params_bytes), "140 GB");
  EXPECT_FALSE(plan.fits) << "no single GPU holds it";
}

TEST(PlannerTest, BytesPerParameterFollowTheZeroPaper) {
  for (Precision mixed : {Precision::fp16, Precision::bf16}) {
    BytesPerParameter b = bytes_per_parameter(mixed, OptimizerKind::adam);
    EXPECT_EQ(b.params, 2);
    EXPECT_EQ(b.grads, 2);
    EXPECT_EQ(b.optimizer, 12) << "f32 master weights, m and v";
    EXPECT_EQ(b.total(), 16);
  }
  EXPECT_EQ(bytes_per_parameter(Precision::fp32, OptimizerKind::adam).total(), 16);
  EXPECT_EQ(bytes_per_parameter(Precision::fp32, OptimizerKind::momentum).optimizer, 4);
  EXPECT_EQ(bytes_per_parameter(Precision::fp32, OptimizerKind::sgd).optimizer, 0);
  EXPECT_EQ(bytes_per_parameter(Precision::bf16, OptimizerKind::sgd).optimizer, 4) << "the master copy alone";
  EXPECT_EQ(bytes_per_parameter(Precision::bf16_pure, OptimizerKind::adam).total(), 8);
  // Before sharding the plan multiplies exactly.
  Plan plan = make_plan(ModelDescription::parameters_only(7'000'000'000), request(Precision::bf16));
  EXPECT_EQ(plan.params_bytes + plan.grads_bytes + plan.optimizer_bytes, 16 * int64_t{7'000'000'000});
  EXPECT_EQ(plan.total_bytes, 112'000'000'000);
}

TEST(PlannerTest, ZeroStagesShardOptimizerThenGradientsThenParameters) {
  const ModelDescription model = ModelDescription::parameters_only(7'000'000'000);
  const Plan alone = make_plan(model, request(Precision::bf16));
  for (int64_t n : {2, 8, 64}) {
    const Plan one = make_plan(model, request(Precision::bf16, OptimizerKind::adam, 1, n));
    EXPECT_EQ(one.optimizer_bytes, alone.optimizer_bytes / n);
    EXPECT_EQ(one.grads_bytes, alone.grads_bytes);
    const Plan two = make_plan(model, request(Precision::bf16, OptimizerKind::adam, 2, n));
    EXPECT_EQ(two.grads_bytes, alone.grads_bytes / n);
    EXPECT_EQ(two.params_bytes, alone.params_bytes);
    const Plan three = make_plan(model, request(Precision::bf16, OptimizerKind::adam, 3, n));
    EXPECT_EQ(three.params_bytes, alone.params_bytes / n);
    EXPECT_EQ(three.grads_bytes, alone.grads_bytes / n);
    EXPECT_EQ(three.optimizer_bytes, alone.optimizer_bytes / n);
    EXPECT_EQ(three.total_bytes, alone.total_bytes / n) << "Psi (2 + 2 + 12) / N";
  }
  // The textbook FSDP example: 10 GB of parameters, gradients and 20 GB of Adam states (fp32, 2.5e9
  // parameters) on 4 GPUs with FSDP: 2.5 + 2.5 + 5 = 10 GB per GPU.
  const Plan fsdp = make_plan(ModelDescription::parameters_only(2'500'000'000),
                              request(Precision::fp32, OptimizerKind::adam, 3, 4));
  EXPECT_EQ(fsdp.params_bytes, 2'500'000'000);
  EXPECT_EQ(fsdp.optimizer_bytes, 5'000'000'000);
  EXPECT_EQ(fsdp.total_bytes, 10'000'000'000);
}

// The paper's per-rank model states in weft's f32 layout (4 + 4 + 8) and in the mixed-precision
// one with f32 masters (2 + 2 + 12); tests/dist/test_zero.cpp holds the allocator to the same plan.
TEST(PlannerTest, ZeroPerRankBytesAreThePapersFormulasInBothLayouts) {
  const int64_t psi = 1'000'000'000;
  const ModelDescription model = ModelDescription::parameters_only(psi);
  auto states = [&](Precision precision, int stage, int64_t n) {
    const Plan plan = make_plan(model, request(precision, OptimizerKind::adamw, stage, n));
    return plan.params_bytes + plan.grads_bytes + plan.optimizer_bytes;
  };
  for (int64_t n : {1, 2, 4}) {
    EXPECT_EQ(states(Precision::fp32, 1, n), 8 * psi + 8 * psi / n);
    EXPECT_EQ(states(Precision::fp32, 2, n), 4 * psi + 12 * psi / n);
    EXPECT_EQ(states(Precision::fp32, 3, n), 16 * psi / n);
    EXPECT_EQ(states(Precision::bf16, 1, n), 4 * psi + 12 * psi / n);
    EXPECT_EQ(states(Precision::bf16, 2, n), 2 * psi + 14 * psi / n);
    EXPECT_EQ(states(Precision::bf16, 3, n), 16 * psi / n);
  }
}

TEST(PlannerTest, ZeroThreeHoldsTheLargestLayerUnshardedWhileComputingIt) {
  const nn::GPTConfig config = kGpt2Small;  // the token embedding (50257 x 768) is the largest unit
  const ModelDescription model = ModelDescription::gpt(config);
  EXPECT_EQ(model.largest_unit_parameters(), 50257 * 768);
  Plan plan = make_plan(model, {.batch = 8, .precision = Precision::bf16, .optimizer = OptimizerKind::adam, .zero = 3,
                                .world = 8, .checkpoint_activations = false, .device = "H100"});
  const int64_t unit = 50257 * 768 * (2 + 2);
  EXPECT_EQ(plan.gathered_bytes, unit - (unit + 7) / 8);
}

TEST(PlannerTest, StrategyChartRowsFollowTheChart) {
  const int64_t GB = 1'000'000'000;
  EXPECT_EQ(strategy_chart_row(GB - 1, "GPU").strategy, "Single GPU, FP32");
  EXPECT_EQ(strategy_chart_row(GB, "GPU").strategy, "Single GPU, mixed precision");
  EXPECT_EQ(strategy_chart_row(10 * GB, "GPU").strategy, "DDP (2-4 GPUs), mixed precision");
  EXPECT_EQ(strategy_chart_row(40 * GB, "GPU").strategy, "FSDP (4-8 GPUs), BF16");
  EXPECT_EQ(strategy_chart_row(100 * GB, "GPU").strategy, "FSDP (8+ GPUs), BF16, gradient checkpointing");
  EXPECT_EQ(strategy_chart_row(1000 * GB, "GPU").strategy, "Tensor parallelism + pipeline + FSDP");
  // The cpu device's plan names what it runs on.
  EXPECT_EQ(strategy_chart_row(GB - 1, "CPU").strategy, "Single CPU, FP32");
  EXPECT_EQ(strategy_chart_row(10 * GB, "CPU").strategy, "DDP (2-4 CPUs), mixed precision");
  EXPECT_EQ(make_plan(ModelDescription::builtin("mlp"), {.device = "cpu"}).chart.strategy, "Single CPU, FP32");
  EXPECT_EQ(make_plan(ModelDescription::builtin("mlp"), {.device = "H100"}).chart.strategy, "Single GPU, FP32");
  // LLaMA-70B: 280 GB of fp32 weights lands where it is usually trained (FSDP + BF16 + checkpointing).
  Plan llama = make_plan(ModelDescription::parameters_only(70'000'000'000), request(Precision::bf16));
  EXPECT_EQ(llama.model_size_bytes, 280 * GB);
  EXPECT_STREQ(llama.chart.model_size, "100GB-1TB");
}

TEST(PlannerTest, APlanThatDoesNotFitSaysWhatWould) {
  const ModelDescription model = ModelDescription::parameters_only(70'000'000'000);
  Plan plan = make_plan(model, request(Precision::fp32));
  ASSERT_FALSE(plan.fits);
  ASSERT_TRUE(plan.fits_with.has_value());
  EXPECT_EQ(plan.fits_with->precision, Precision::bf16);
  EXPECT_EQ(plan.fits_with->zero, 3);
  EXPECT_EQ(plan.fits_with->world, 16) << "1.12 TB / 16 = 70 GB fits 80 GB, / 8 = 140 GB does not";
  EXPECT_LE(plan.fits_with_total_bytes, 80'000'000'000);
  // The suggestion is itself a plan that fits.
  EXPECT_TRUE(make_plan(model, *plan.fits_with).fits);
}

TEST(PlannerTest, CheckpointingShrinksTheActivationsOfADeepModel) {
  const nn::GPTConfig config{.layers = 24, .heads = 16, .dim = 1024, .context = 1024, .vocab = 50257};
  const ModelDescription model = ModelDescription::gpt(config);
  PlanRequest r{.batch = 8, .precision = Precision::fp32, .optimizer = OptimizerKind::adam, .zero = 0, .world = 1,
                .checkpoint_activations = false, .device = "H200"};
  const Plan full = make_plan(model, r);
  r.checkpoint_activations = true;
  const Plan checkpointed = make_plan(model, r);
  EXPECT_LT(checkpointed.activations_bytes, full.activations_bytes / 3);
  // What is kept: each block's input [8, 1024, 1024] f32 = 32 MiB, 24 of them, plus one block
  // recomputed and the head's logits: far below the full tape, far above the boundaries alone.
  EXPECT_GT(checkpointed.activations_bytes, 24 * 32 * (int64_t{1} << 20));
}

TEST(PlannerTest, GptFamilyCountsParametersExactly) {
  EXPECT_EQ(gpt_parameters(kGpt2Small), 124'439'808) << "GPT-2 small";
  const nn::GPTConfig medium{.layers = 24, .heads = 16, .dim = 1024, .context = 1024, .vocab = 50257};
  EXPECT_EQ(gpt_parameters(medium), 354'823'168) << "GPT-2 medium";
  for (int64_t dim : {64, 128, 768}) {
    nn::TransformerBlock block(dim, 4);
    const nn::GPTConfig c{.layers = 1, .heads = 4, .dim = dim, .context = 1, .vocab = 1};
    EXPECT_EQ(gpt_block_parameters(c), block.num_parameters()) << "hidden " << dim;
  }
  // The tape hands every parameter's gradient back exactly once (the tied embedding included).
  const nn::GPTConfig small{.layers = 2, .heads = 4, .dim = 64, .context = 16, .vocab = 100};
  const ModelDescription model = ModelDescription::gpt(small);
  int64_t tensors = 0;
  for (int64_t n : model.parameter_tensors()) tensors += n;
  EXPECT_EQ(tensors, gpt_parameters(small));
  EXPECT_EQ(gpt_parameters(small), nn::GPT(small).num_parameters());
}

TEST(PlannerTest, BuiltinClassifiersMatchTheirNnModels) {
  EXPECT_EQ(ModelDescription::builtin("mlp").num_parameters(), nn::make_mlp()->num_parameters());
  EXPECT_EQ(ModelDescription::builtin("cnn").num_parameters(), nn::make_cnn()->num_parameters());
  EXPECT_TRUE(ModelDescription::builtin("cnn").knows_activations());
  EXPECT_FALSE(ModelDescription::parameters_only(10).knows_activations());
}

TEST(PlannerTest, ImpossiblePlansAreValueErrorsSayingWhatToDo) {
  const ModelDescription mlp = ModelDescription::builtin("mlp");
  auto plan_with = [&](PlanRequest r) { return message_of<ValueError>([&] { make_plan(mlp, r); }); };
  PlanRequest r = request(Precision::fp32);
  r.batch = 128;
  r.world = 3;
  EXPECT_TRUE(contains(plan_with(r), "--gpus: must divide --batch-size (128)")) << plan_with(r);
  r.world = 0;
  EXPECT_TRUE(contains(plan_with(r), "--gpus: must be a whole number from 1 to 1048576, got '0'"));
  r.world = 1;
  r.zero = 4;
  EXPECT_TRUE(contains(plan_with(r), "--zero: must be a whole number from 0 to 3, got '4'"));
  r.zero = 0;
  r.batch = -5;
  EXPECT_TRUE(contains(plan_with(r), "--batch-size: must be a whole number from 1 to 1073741824, got '-5'"));
  r.batch = 128;
  r.device = "TPUv9";
  EXPECT_TRUE(contains(plan_with(r), "A100-40GB|A100-80GB|H100|H200|RTX4090|cpu"));
  auto gpt_error = [](nn::GPTConfig c) { return message_of<ValueError>([&] { ModelDescription::gpt(c); }); };
  EXPECT_TRUE(contains(gpt_error({.heads = 5, .dim = 768}), "--heads: must divide --dim (768)"));
  EXPECT_TRUE(contains(gpt_error({.layers = 0}), "--layers: must be a whole number from 1 to 1024, got '0'"));
  EXPECT_TRUE(contains(gpt_error({.vocab = -3}), "--vocab"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { ModelDescription::parameters_only(0); }), "--params"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { ModelDescription::builtin("resnet"); }), "mlp, cnn, gpt or gpt2"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { amp::parse_precision("int3"); }), "bf16-pure"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { optim::parse_optimizer("lion"); }), "momentum"));
  // Sizes each within its bound whose activations would not fit in 64 bits are implausible, not a number.
  const nn::GPTConfig huge{.layers = 1, .heads = 4, .dim = int64_t{1} << 20, .context = int64_t{1} << 30, .vocab = 10};
  EXPECT_TRUE(contains(message_of<ValueError>([&] {
    make_plan(ModelDescription::gpt(huge), {.batch = 1 << 20, .precision = Precision::fp32,
                                            .optimizer = OptimizerKind::adam, .zero = 0, .world = 1,
                                            .checkpoint_activations = false, .device = "H100"});
  }), "2^63"));
}

// The planner's share of each stage is the one dist::GPTStage cuts: the same tensors in the same
// order (ZeRO's and DDP's buckets follow it), for even and uneven cuts.
TEST(PlannerTest, GptStageSharesHoldWhatThePipelineStagesHold) {
  const std::pair<int64_t, int64_t> cuts[] = {{4, 1}, {4, 2}, {5, 2}, {7, 3}, {10, 4}, {6, 6}};
  for (auto [layers, stages] : cuts) {
    const nn::GPTConfig c{.layers = layers, .heads = 2, .dim = 8, .context = 4, .vocab = 16};
    const nn::GPT whole(c);
    for (int64_t s = 0; s < stages; ++s) {
      std::vector<int64_t> held;
      for (const Tensor& p : dist::GPTStage(whole, s, stages).parameters()) held.push_back(p.numel());
      EXPECT_EQ(ModelDescription::gpt(c, {.pp = stages, .stage = s}).parameter_tensors(), held)
          << "stage " << s << " of " << stages << ", " << layers << " layers";
    }
  }
}

// Tensor and pipeline parallelism: the stages' shares add up to the whole GPT (the last stage's copy
// of the tied embedding and the tensor-parallel ranks' whole norms and row biases counted where they
// are held), 1F1B keeps fewer micro-batches than GPipe, ZeRO-1 shards a share's optimizer states, and
// what weft train refuses is refused.
TEST(PlannerTest, SplitPlansShareTheModelAndRefuseWhatTrainingRefuses) {
  const nn::GPTConfig c{.layers = 4, .heads = 4, .dim = 128, .context = 64, .vocab = 512};
  const int64_t whole = gpt_parameters(c), D = c.dim, V = c.vocab;
  int64_t staged = 0;
  for (int64_t s = 0; s < 3; ++s) staged += ModelDescription::gpt(c, {.pp = 3, .stage = s}).num_parameters();
  EXPECT_EQ(staged, whole + V * D);
  // Whole on every tensor-parallel rank: wpe, two norms a block and the final one, the row biases.
  const int64_t replicated = c.context * D + c.layers * (4 * D + 2 * D) + 2 * D;
  EXPECT_EQ(2 * ModelDescription::gpt(c, {.tp = 2}).num_parameters(), whole + replicated);
  PlanRequest r{.batch = 16, .optimizer = OptimizerKind::adamw, .world = 2, .pp = 2, .micro_batches = 4};
  r.pp_schedule = "gpipe";
  const Plan gpipe = make_plan(ModelDescription::gpt(c), r);
  r.pp_schedule = "1f1b";
  const Plan one_f_one_b = make_plan(ModelDescription::gpt(c), r);
  ASSERT_EQ(gpipe.stages.size(), 2u);
  EXPECT_EQ(gpipe.stages[0].in_flight, 4);
  EXPECT_EQ(one_f_one_b.stages[0].in_flight, 2);
  EXPECT_EQ(one_f_one_b.stages[1].in_flight, 1);
  EXPECT_LT(one_f_one_b.stages[0].activations_bytes, gpipe.stages[0].activations_bytes);
  EXPECT_EQ(one_f_one_b.stages[0].params_bytes, gpipe.stages[0].params_bytes);

  auto plan_with = [&](const ModelDescription& model, PlanRequest q) {
    return message_of<ValueError>([&] { make_plan(model, q); });
  };
  const ModelDescription gpt = ModelDescription::gpt(c);
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .world = 3, .tp = 3}), "--tp 3"));
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .world = 5, .pp = 5, .micro_batches = 8}), "--layers must be at least --pp"));
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .world = 3, .tp = 2}), "--gpus: must be a multiple of --tp x --pp"));
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .world = 2, .pp = 2, .micro_batches = 1}),
                       "1F1B over 2 stages needs at least 2 micro-batches"));
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .zero = 2, .world = 4, .tp = 2}), "--zero 2: not with --tp or --pp"));
  // ZeRO-1 divides a tensor-parallel share's optimizer states over the replicas, and keeps its
  // gradients in flat buckets.
  const Plan zero1 = make_plan(gpt, {.batch = 8, .optimizer = OptimizerKind::adamw, .zero = 1, .world = 4, .tp = 2});
  EXPECT_EQ(zero1.optimizer_bytes, ModelDescription::gpt(c, {.tp = 2}).num_parameters() * 8 / 2);
  EXPECT_GE(zero1.bucket_bytes, ModelDescription::gpt(c, {.tp = 2}).num_parameters() * 4);
  EXPECT_TRUE(contains(plan_with(gpt, {.batch = 8, .world = 2, .tp = 2, .micro_batches = 3}),
                       "--grad-accum: must divide each replica's batch (8)"));
  EXPECT_TRUE(contains(plan_with(ModelDescription::builtin("mlp"), {.batch = 8, .world = 2, .tp = 2}),
                       "tensor and pipeline parallelism split a GPT"));
}

TEST(PlannerTest, ClassifierWithAnUnknownLayerIsRefusedByName) {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(),
                                                std::make_shared<nn::Embedding>(10, 4));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { ModelDescription::classifier("odd", model, {1, 2}); }),
                       "1 Embedding"));
}

TEST(PlannerTest, ParameterCountsReadLikeTextbooksWriteThem) {
  EXPECT_EQ(parse_parameter_count("70e9"), 70'000'000'000);
  EXPECT_EQ(parse_parameter_count("7B"), 7'000'000'000);
  EXPECT_EQ(parse_parameter_count("124M"), 124'000'000);
  EXPECT_EQ(parse_parameter_count("1.5k"), 1500);
  EXPECT_EQ(parse_parameter_count("535818"), 535818);
  for (const char* bad : {"", "0", "-5", "abc", "1.5", "7Q", "1e16", "nan", "B"})
    EXPECT_TRUE(contains(message_of<ValueError>([&] { parse_parameter_count(bad); }), "--params")) << bad;
}

TEST(DevicesTest, NamedDevicesHaveDatasheetCapacitiesAndCpuIsThisMachine) {
  EXPECT_EQ(find_device("A100-40GB").memory_bytes, 40'000'000'000);
  EXPECT_EQ(find_device("a100-80gb").memory_bytes, 80'000'000'000) << "names are case-insensitive";
  EXPECT_EQ(find_device("H100").memory_bytes, 80'000'000'000);
  EXPECT_EQ(find_device("H200").memory_bytes, 141'000'000'000);
  EXPECT_EQ(find_device("RTX4090").memory_bytes, 24'000'000'000);
  for (const DeviceSpec& d : gpu_devices()) EXPECT_TRUE(contains(d.source, "nvidia.com")) << d.name;
  EXPECT_GT(find_device("cpu").memory_bytes, int64_t{1} << 28);
}

TEST(FormatDecimalBytesTest, ThreeSignificantDigitsInDecimalUnits) {
  EXPECT_EQ(format_decimal_bytes(999), "999 B");
  EXPECT_EQ(format_decimal_bytes(1000), "1.00 kB");
  EXPECT_EQ(format_decimal_bytes(33'634'816), "33.6 MB");
  EXPECT_EQ(format_decimal_bytes(140'000'000'000), "140 GB");
  EXPECT_EQ(format_decimal_bytes(999'600'000), "1.00 GB");
  EXPECT_EQ(format_decimal_bytes(1'120'000'000'000), "1.12 TB");
}

}  // namespace
}  // namespace weft::memory
