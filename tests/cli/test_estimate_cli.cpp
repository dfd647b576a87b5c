// `weft estimate` as a user meets it: the worked examples (GPT-3's 3.14e23 FLOPs), the JSON lines,
// the calibrated estimate of `weft train --model mlp` against a real run, and one clear line with
// exit status 2 for every impossible input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "weft/core/error.h"
#include "temp_dir.h"
#include "weft_cli.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_TEST_UNDER_ASAN 1
#endif
#endif

namespace weft {
namespace {

using testing::contains;
using testing::Outcome;
using testing::weft_cli;

nlohmann::json estimate_json(const std::string& args) {
  Outcome o = weft_cli("estimate " + args + " --json");
  EXPECT_EQ(o.status, 0) << o.output;
  return testing::last_line_json(o.output);
}

void expect_usage_error(const std::string& args, const std::string& says) {
  SCOPED_TRACE(args);
  testing::expect_usage_error(weft_cli("estimate " + args), says);
}

TEST(EstimateCliTest, Gpt3OnA100sAsTheTextbookHasIt) {
  const nlohmann::json j = estimate_json("time --params 174.6e9 --tokens 300e9 --device A100-40GB --mfu 1");
  EXPECT_NEAR(j["flops"].get<double>(), 3.14e23, 0.005e23);
  EXPECT_DOUBLE_EQ(j["peak_flops"].get<double>(), 312e12);
  EXPECT_NEAR(j["seconds"].get<double>(), 3.1428e23 / 312e12, 1e5);
  EXPECT_NEAR(j["days"].get<double>(), j["seconds"].get<double>() / 86400, 1e-6);
  // Given as FLOPs, on 1024 H100s at 40%: 3.14e23 / (1024 x 989e12 x 0.4) = 7.75e5 s, 9 days.
  const nlohmann::json h = estimate_json("time --flops 3.14e23 --device H100 --count 1024 --mfu 0.4");
  EXPECT_NEAR(h["days"].get<double>(), 3.14e23 / (1024 * 989e12 * 0.4) / 86400, 1e-9);
  EXPECT_NEAR(h["days"].get<double>(), 8.97, 0.01);
  // The text names the formula's parts and the datasheet.
  const Outcome text = weft_cli("estimate time --params 174.6e9 --tokens 300e9 --device A100-40GB --mfu 1");
  EXPECT_TRUE(contains(text.output, "= 3.143e+23")) << text.output;
  EXPECT_TRUE(contains(text.output, "31.9 years")) << text.output;
  EXPECT_TRUE(contains(text.output, "A100 Tensor Core GPU datasheet")) << text.output;
}

TEST(EstimateCliTest, CostOnDemandSpotAndInterruptions) {
  // 8 A100-80GB for 6.4e21 FLOPs at 40%: 6.4e21 / (8 x 312e12 x 0.4) = 6.41e6 s = 1781 hours each.
  const std::string run = "cost --flops 6.4e21 --device A100-80GB --count 8 --mfu 0.4 ";
  const nlohmann::json j = estimate_json(run);
  const double device_hours = 6.4e21 / (8 * 312e12 * 0.4) / 3600 * 8;
  EXPECT_NEAR(j["device_hours"].get<double>(), device_hours, 1e-6);
  EXPECT_NEAR(j["on_demand_usd"].get<double>(), device_hours * 40.97 / 8, 1e-3);
  EXPECT_EQ(j["interruptions"].get<double>(), 0);
  EXPECT_TRUE(contains(j["price_source"].get<std::string>(), "p4de.24xlarge"));
  EXPECT_EQ(j["price_snapshot"], "2024-12");
  // Interrupted twice an hour with 20-minute checkpoints (10 s each) and 4 minutes to restart: each
  // loses 14 minutes, so W = (compute + checkpoints) / (1 - 2 x 14 / 60).
  const nlohmann::json s = estimate_json(run + "--checkpoint-every 20 --checkpoint-seconds 10 "
                                               "--interruptions-per-hour 2 --restart-minutes 4");
  const double compute_s = 6.4e21 / (8 * 312e12 * 0.4);
  const double checkpoints_s = std::floor(compute_s / 1200) * 10;
  EXPECT_NEAR(s["spot_wall_seconds"].get<double>(), (compute_s + checkpoints_s) / (1 - 28.0 / 60), 1e-3);
  EXPECT_NEAR(s["spot_usd"].get<double>(), s["spot_wall_seconds"].get<double>() / 3600 * 8 * 0.3 * 40.97 / 8, 1e-3);
  EXPECT_GT(s["spot_usd"].get<double>(), j["spot_usd"].get<double>());
  // Given prices replace the table's.
  EXPECT_NEAR(estimate_json(run + "--usd-per-hour 2 --spot-usd-per-hour 1")["on_demand_usd"].get<double>(),
              2 * device_hours, 1e-6);
  // Interruptions faster than the work lost to each: never finishes.
  const Outcome never = weft_cli("estimate " + run + "--checkpoint-every 60 --interruptions-per-hour 2");
  EXPECT_EQ(never.status, 0) << never.output;
  EXPECT_TRUE(contains(never.output, "never finishes")) << never.output;
  // Spot against on demand in words that hold at both ends: a thousandth of the price is no "100%
  // less", and twice the price is "more", not a negative saving.
  const Outcome cheap = weft_cli("estimate " + run + "--usd-per-hour 10 --spot-usd-per-hour 0.01");
  EXPECT_TRUE(contains(cheap.output, "(0.1033% of the on-demand cost)")) << cheap.output;
  const Outcome dear = weft_cli("estimate " + run + "--usd-per-hour 1 --spot-usd-per-hour 2");
  EXPECT_TRUE(contains(dear.output, "% more than on demand)")) << dear.output;
  EXPECT_FALSE(contains(cheap.output + dear.output, "100% less")) << cheap.output << dear.output;
  const Outcome slow = weft_cli("estimate " + run + "--checkpoint-every 1e-300");
  EXPECT_TRUE(contains(slow.output, "(3e+299 times the on-demand cost)")) << slow.output;
}

TEST(EstimateCliTest, CommSaysWhichIsTheBottleneckAndWhatChangesIt) {
  // 1.5e9 fp32 gradients over 8 ranks on PCIe 4.0: 2 x 7/8 x 6e9 / 32e9 = 0.328 s, against
  // 6 x 1.5e9 x 1024 tokens per rank / (312e12 x 0.4) = 0.0738 s of compute.
  const nlohmann::json j =
      estimate_json("comm --params 1.5e9 --world 8 --link pcie4 --batch 8192 --device A100-40GB --mfu 0.4");
  EXPECT_NEAR(j["allreduce_seconds"].get<double>(), 2 * 7.0 / 8 * 6e9 / 32e9 + 14 * 5e-6, 1e-9);
  EXPECT_NEAR(j["compute_seconds"].get<double>(), 6 * 1.5e9 * 1024 / (312e12 * 0.4), 1e-9);
  EXPECT_TRUE(j["communication_bound"].get<bool>());
  EXPECT_NEAR(j["zero12_seconds"].get<double>(), j["allreduce_seconds"].get<double>(), 1e-12);
  EXPECT_NEAR(j["zero3_seconds"].get<double>(), 1.5 * j["allreduce_seconds"].get<double>(), 1e-12);
  EXPECT_LT(j["one_bit_seconds"].get<double>(), j["allreduce_seconds"].get<double>() / 30);
  // On NVLink the same step is compute-bound.
  EXPECT_FALSE(estimate_json("comm --params 1.5e9 --world 8 --link nvlink --batch 8192 --device A100-40GB")
                   ["communication_bound"]
                       .get<bool>());
  // Small buffers over many ranks: the latency term dominates.
  const nlohmann::json small = estimate_json("comm --bytes 1e6 --world 64 --link ethernet10");
  EXPECT_NEAR(small["allreduce_seconds"].get<double>(), 2 * 63.0 / 64 * 1e6 / 1.25e9 + 126 * 30e-6, 1e-12);
  const Outcome text = weft_cli("estimate comm --params 1.5e9 --world 8 --link pcie4 --batch 8192 --device A100-40GB");
  EXPECT_TRUE(contains(text.output, "communication is the bottleneck")) << text.output;
  EXPECT_TRUE(contains(text.output, "ZeRO-3: 1.5x")) << text.output;
}

// The estimate from --calibrate's measured rates against a real `weft train --model mlp`, both on one
// thread (the two cores here are shared; one thread is what each can count on). Both take the machine
// at its fastest, since other processes only ever add time: --calibrate the fastest of its timed calls,
// the run its fastest window of 20 steps (metrics.jsonl's train/samples_per_s, which times the steps
// alone: data loading and start-up are outside it). Under AddressSanitizer weft's own loops (the
// optimizer, the copies) run instrumented and the GEMMs do not, so both commands run but their times
// say nothing about the machine and are not compared. A test running beside it (ctest -j 2) can
// still slow one of the two for the whole of it, and the two commands do not run at the same
// moment: up to three tries, and the closest must be within 30%.
TEST(EstimateCliTest, CalibratedEstimateOfTheMlpIsWithin30PercentOfARealRun) {
  std::string closest;
  double closest_off = INFINITY;
  for (int attempt = 0; attempt < 3 && closest_off > 0.3; ++attempt) {
    testing::TempDir dir;
    const nlohmann::json estimate = estimate_json("--calibrate --threads 1 --batch-size 128 --steps 300 --seconds 0.3");
    const double estimated_step_s = estimate["mlp_step_seconds"].get<double>();
    EXPECT_GT(estimate["gemm_flops_per_s"].get<double>(), 0);
    EXPECT_GT(estimate["allreduce_seconds"].get<double>(), 0);
    Outcome o = weft_cli("train --model mlp --batch-size 128 --steps 300 --threads 1 --eval-every 0 --log-every 20 --out " +
                         dir.file("run"));
    ASSERT_EQ(o.status, 0) << o.output;
    double best_samples_per_s = 0;
    std::ifstream metrics(dir.file("run") + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);)
      best_samples_per_s = std::max(best_samples_per_s, nlohmann::json::parse(line).value("train/samples_per_s", 0.0));
    ASSERT_GT(best_samples_per_s, 0);
    const double real_step_s = 128 / best_samples_per_s;
    const std::string figures = str("estimated ", estimated_step_s * 1e3, " ms a step, ran ", real_step_s * 1e3, " ms");
#ifdef WEFT_TEST_UNDER_ASAN
    GTEST_SKIP() << "timings under AddressSanitizer: " << figures;
#endif
    if (std::abs(estimated_step_s / real_step_s - 1) < closest_off) {
      closest_off = std::abs(estimated_step_s / real_step_s - 1);
      closest = figures;
    }
  }
  EXPECT_LE(closest_off, 0.3) << "the closest of three tries: " << closest;
}

TEST(EstimateCliTest, ImpossibleInputsAreOneLineAndStatus2) {
  const std::string run = "time --params 1e9 --tokens 1e9 ";
  expect_usage_error(run + "--device B200", "--device: must be one of A100-40GB|A100-80GB|H100|H200|RTX4090|cpu, got 'B200'");
  expect_usage_error("comm --bytes 1e9 --world 8 --link carrier-pigeon", "--link: must be one of nvlink|pcie4|");
  expect_usage_error("time --params 0 --tokens 1e9", "--params: must be");
  expect_usage_error("time --params -5 --tokens 1e9", "got '-5'");
  expect_usage_error("time --params 1e9 --tokens 0", "--tokens: must be");
  expect_usage_error("time --flops -1", "--flops: must be");
  expect_usage_error(run + "--count 0", "--gpus: must be");
  expect_usage_error(run + "--mfu 0", "--mfu: must be");
  expect_usage_error(run + "--mfu 1.5", "--mfu: must be");
  expect_usage_error(run + "--precision fp8", "--precision: must be one of bf16, fp16, fp32, tf32, int8, got 'fp8'");
  expect_usage_error("time --params 1e9 --tokens 1e9 --device cpu --precision tf32", "--precision tf32: cpu has no TF32 units");
  expect_usage_error("time --params 1e9", "estimate time: give --params and --tokens, or --flops");
  expect_usage_error("time --flops 1e20 --params 1e9 --tokens 1e9", "give the FLOPs twice");
  expect_usage_error("comm --bytes 0 --world 8", "--bytes: must be");
  expect_usage_error("comm --bytes 1e9 --gpus 0", "--gpus: must be");
  expect_usage_error("comm --world 8", "estimate comm: give --bytes, or --params");
  expect_usage_error("comm --bytes 1e9 --world 8 --batch 1024", "--batch-tokens needs --params");
  expect_usage_error("cost --flops 1e20 --device cpu", "no price for cpu; give --usd-per-hour");
  expect_usage_error("cost --flops 1e20 --checkpoint-every 0", "--checkpoint-every: must be");
  expect_usage_error("cost --flops 1e20 --interruptions-per-hour -1", "--interruptions-per-hour: must be");
  expect_usage_error("", "estimate: give time, cost, comm or --calibrate");
  // No "inf s": products beyond a double's range are refused, and threads past what libgomp starts.
  expect_usage_error("time --params 1e15 --tokens 1e300", "6 x --params x --tokens is beyond a double's range");
  expect_usage_error("time --flops 1e300 --mfu 1e-300", "take more seconds than a double holds (1.8e+308); raise --mfu");
  expect_usage_error("cost --flops 1e300 --mfu 1e-22 --usd-per-hour 1e6", "cost more dollars than a double holds");
  expect_usage_error("cost --flops 1e20 --checkpoint-seconds 1.7e308", "the spot run's time or cost, with a checkpoint of "
                     "--checkpoint-seconds 1.7e+308 every --checkpoint-every 30 minutes, is beyond a double's range");
  expect_usage_error("cost --flops 1e20 --usd-per-hour 1e306", "--usd-per-hour: must be a number in [1e-06, 1e+06], got '1e306'");
  // Tiny values overflowed a ratio or an interval to "inf" (a subnormal price, a rare interruption).
  expect_usage_error("cost --flops 1e20 --usd-per-hour 1e-320", "--usd-per-hour: must be a number in [1e-06, 1e+06], got '1e-320'");
  expect_usage_error("cost --flops 1e20 --interruptions-per-hour 1e-320", "--interruptions-per-hour: must be 0 or at least 1e-09");
  expect_usage_error("--calibrate --threads 100000", "--threads: must be a whole number from 0 to 1024, got '100000'");
  expect_usage_error("comm --bytes 1.7e308 --world 8", "ranks take more seconds to all-reduce than a double holds");
  expect_usage_error("comm --params 1e15 --batch 1e308 --world 2", "the step's compute, 6 x --params x --batch-tokens "
                     "per rank / (peak x --mfu), takes more seconds than a double holds (1.8e+308)");
  expect_usage_error("comm --params 1e9 --grad-bytes 1e308", "--grad-bytes: must be a number in (0, 8], got '1e308'");
  expect_usage_error(run + "--gpus 99999999", "--gpus: must be a whole number from 1 to 1048576, got '99999999'");
  // --calibrate estimates weft train --model mlp: its batch and steps take train's bounds.
  expect_usage_error("--calibrate --batch-size 9223372036854775807",
                     "--batch-size: must be a whole number from 1 to 1073741824, got '9223372036854775807'");
  expect_usage_error("--calibrate --steps 9223372036854775807",
                     "--steps: must be a whole number from 1 to 1000000000000, got '9223372036854775807'");
}

}  // namespace
}  // namespace weft
