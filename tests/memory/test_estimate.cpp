// The calculators' arithmetic (memory/estimate.h), the device and link table behind them
// (memory/devices.h), and the MLP's FLOPs that --calibrate times (memory/calibrate.h).
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/memory/calibrate.h"
#include "weft/memory/devices.h"
#include "weft/memory/estimate.h"
#include "weft/nn/models.h"

namespace weft::memory {
namespace {

using testing::contains;
using testing::message_of;

// GPT-3: 174.6e9 parameters (the paper's exact count; "175B" rounded) on 300e9 tokens.
TEST(EstimateTest, Gpt3TrainingFlopsAre314Zetta) {
  EXPECT_NEAR(training_flops(174.6e9, 300e9), 3.14e23, 0.005e23);
  EXPECT_DOUBLE_EQ(training_flops(175e9, 300e9), 3.15e23) << "the rounded count gives 3.15e23, 0.3% more";
}

TEST(EstimateTest, TrainingTimeIsFlopsOverPeakMfuAndCount) {
  const double a100 = find_device("A100-40GB").peak.bf16, h100 = find_device("H100").peak.bf16;
  EXPECT_DOUBLE_EQ(a100, 312e12);
  // One A100 at its full peak: 3.14e23 / 312e12 = 1.006e9 s, about 32 years.
  EXPECT_NEAR(training_seconds(3.14e23, a100, 1, 1.0) / (365.25 * 86400), 31.9, 0.1);
  // The H100 is about 3.2 times the A100 (dense bf16 989 vs 312 TFLOPS).
  EXPECT_NEAR(training_seconds(3.14e23, a100, 1, 1.0) / training_seconds(3.14e23, h100, 1, 1.0), 3.17, 0.01);
  // 1024 devices at 40% MFU: 1024 x 0.4 = 409.6 times faster than one at full peak.
  EXPECT_NEAR(training_seconds(3.14e23, a100, 1, 1.0) / training_seconds(3.14e23, a100, 1024, 0.4), 409.6, 1e-6);
}

TEST(EstimateTest, RingAllReduceIsBandwidthTermPlusLatencyTerm) {
  EXPECT_EQ(ring_allreduce_seconds(1e9, 1, 100e9, 1e-6), 0) << "one rank sends nothing";
  // 8 ranks: 2 x 7/8 x 1e9 / 100e9 = 17.5 ms, plus 14 steps x 1 us.
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 8, 100e9, 1e-6), 0.0175 + 14e-6, 1e-12);
  // The bandwidth term approaches 2 S / B however large the ring.
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 1000000, 1e9, 0), 2.0, 1e-5);
}

TEST(EstimateTest, SpotRunWithoutInterruptionsPaysOnlyForCheckpoints) {
  const SpotRun run = spot_run(10 * 3600, 30 * 60, 60, 0, 300);
  EXPECT_TRUE(run.finishes);
  EXPECT_EQ(run.checkpoint_s, 20 * 60) << "20 checkpoints of 60 s in 10 hours";
  EXPECT_EQ(run.interruptions, 0);
  EXPECT_EQ(run.lost_s, 0);
  EXPECT_EQ(run.wall_s, 10 * 3600 + 20 * 60);
}

TEST(EstimateTest, SpotInterruptionLosesHalfAnIntervalPlusTheRestart) {
  // 1 interruption per hour, 30-minute checkpoints, 5-minute restart: each loses 15 + 5 = 20 min, so
  // a third of every hour is lost: W = (10 h + 20 min of checkpoints) / (1 - 1/3).
  const SpotRun run = spot_run(10 * 3600, 30 * 60, 60, 1, 300);
  ASSERT_TRUE(run.finishes);
  EXPECT_NEAR(run.wall_s, (10 * 3600 + 20 * 60) * 1.5, 1e-6);
  EXPECT_NEAR(run.interruptions, run.wall_s / 3600, 1e-9);
  EXPECT_NEAR(run.lost_s, run.interruptions * 20 * 60, 1e-6);
  EXPECT_NEAR(run.wall_s, 10 * 3600 + run.checkpoint_s + run.lost_s, 1e-6);
  // Young's interval: sqrt(2 x 60 s x 3600 s) = 657 s.
  EXPECT_NEAR(run.best_interval_s, std::sqrt(2.0 * 60 * 3600), 1e-9);
  // Interruptions every 20 minutes, each losing 20: no progress.
  EXPECT_FALSE(spot_run(10 * 3600, 30 * 60, 60, 3, 300).finishes);
}

TEST(DeviceTableTest, EveryGpuHasPeaksBandwidthAndPricesWithSources) {
  for (const DeviceSpec& d : gpu_devices()) {
    SCOPED_TRACE(d.name);
    EXPECT_GT(d.peak.fp32, 0);
    EXPECT_GT(d.peak.bf16, d.peak.fp32) << "tensor cores";
    EXPECT_EQ(d.peak.fp16, d.peak.bf16);
    EXPECT_GE(d.peak.int8, 1.99 * d.peak.bf16) << "int8 runs at least twice the 16-bit rate";
    EXPECT_GT(d.memory_bandwidth, 5e11);
    EXPECT_TRUE(contains(d.compute_source, "NVIDIA"));
    EXPECT_GT(d.usd_per_hour, 0);
    EXPECT_NEAR(d.spot_usd_per_hour, 0.3 * d.usd_per_hour, 1e-12);
    EXPECT_TRUE(contains(d.price_source, "/hour"));
  }
  EXPECT_DOUBLE_EQ(find_device("H100").peak.bf16, 989e12);
  EXPECT_DOUBLE_EQ(find_device("h200").memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device("RTX4090"), "fp32"), 82.6e12);
  EXPECT_TRUE(contains(message_of<ValueError>([] { peak_flops(find_device("H100"), "fp8"); }), "got 'fp8'"));
  // TF32: f32 matrices on the tensor cores, half the 16-bit rate on the data-center parts (the A100's
  // 156 TFLOPS), the fp32 rate on the RTX 4090; none on a CPU.
  EXPECT_DOUBLE_EQ(peak_flops(find_device("A100-80GB"), "tf32"), 156e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device("H100"), "tf32"), 494.5e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device("RTX4090"), "tf32"), 82.6e12);
  for (const DeviceSpec& d : gpu_devices()) {
    EXPECT_GE(d.peak.tf32, d.peak.fp32) << d.name;
    EXPECT_LE(d.peak.tf32, d.peak.bf16 / 2) << d.name;
  }
  EXPECT_TRUE(contains(message_of<ValueError>([] { peak_flops(find_device("cpu"), "tf32"); }), "no TF32 units"));
}

TEST(DeviceTableTest, TheCpuPeakIsCoresTimesFrequencyTimesFlopsPerCycle) {
  const DeviceSpec cpu = find_device("cpu");
  ASSERT_GT(cpu_cores(), 0);
  // Whatever the machine: a whole number of FLOPs per cycle per core, 8 to 64 for fp32, at 0.5-6 GHz.
  const double per_core = cpu.peak.fp32 / static_cast<double>(cpu_cores());
  EXPECT_GT(per_core, 8 * 0.5e9);
  EXPECT_LT(per_core, 64 * 6e9);
  EXPECT_TRUE(contains(cpu.compute_source, "/proc/cpuinfo"));
  EXPECT_EQ(cpu.usd_per_hour, 0) << "this machine has no price";
}

TEST(DeviceTableTest, LinksHaveTheirBandwidthsAndLatencies) {
  EXPECT_DOUBLE_EQ(find_link("nvlink").bandwidth, 600e9);
  EXPECT_DOUBLE_EQ(find_link("PCIe4").bandwidth, 32e9);
  EXPECT_DOUBLE_EQ(find_link("pcie5").bandwidth, 64e9);
  EXPECT_DOUBLE_EQ(find_link("ethernet10").bandwidth, 1.25e9);
  EXPECT_DOUBLE_EQ(find_link("ethernet100").bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(find_link("infiniband200").bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(find_link("infiniband400").bandwidth, 50e9);
  for (const LinkSpec& l : links()) {
    EXPECT_GT(l.latency, 0) << l.name;
    EXPECT_LT(l.latency, 1e-4) << l.name;
    EXPECT_FALSE(l.source.empty()) << l.name;
  }
  EXPECT_LT(find_link("infiniband400").latency, find_link("ethernet100").latency) << "RDMA skips the kernel";
  const std::string message = message_of<ValueError>([] { find_link("token-ring"); });
  EXPECT_TRUE(contains(message, "--link: must be one of nvlink|pcie4|")) << message;
  EXPECT_TRUE(contains(message, "got 'token-ring'")) << message;
}

TEST(CalibrateTest, MlpStepFlopsCountEveryGemmButTheDataGradient) {
  EXPECT_EQ(mlp_parameters(), nn::make_mlp()->num_parameters());
  EXPECT_EQ(mlp_parameters(), 535818);
  // Per sample: 784x512, 512x256, 256x10 weights; forward and weight gradient 2 x 2 x 535,040, and the
  // inputs' gradient 2 x (512x256 + 256x10) for the two layers after the first.
  const double weights = 784 * 512 + 512 * 256 + 256 * 10;
  EXPECT_DOUBLE_EQ(mlp_step_flops(1), 4 * weights + 2 * (512 * 256 + 256 * 10));
  EXPECT_DOUBLE_EQ(mlp_step_flops(128), 128 * mlp_step_flops(1));
  EXPECT_LT(mlp_step_flops(1), 6.0 * static_cast<double>(mlp_parameters()));
}

TEST(CalibrateTest, MeasuredRatesArePositiveAndTheStepAddsTheOptimizer) {
  const GemmRate gemm = measure_square_gemm(64, 0.01);
  EXPECT_DOUBLE_EQ(gemm.flops, 2.0 * 64 * 64 * 64);
  EXPECT_GT(gemm.seconds, 0);
  const AllReduceMeasurement ar = measure_allreduce(1 << 20, 0.01);
  EXPECT_EQ(ar.bytes, 1 << 20);
  EXPECT_GT(ar.copy_bandwidth, 1e8);
  EXPECT_NEAR(ar.formula_s, ar.bytes / ar.copy_bandwidth, 1e-12) << "two ranks: 2 x 1/2 x S / B";
  const GemmRate step{.flops = 1e9, .seconds = 0.002};
  EXPECT_NEAR(mlp_step_seconds(step, 8e9), 0.002 + 32 * 535818 / 16e9, 1e-12);
}

}  // namespace
}  // namespace weft::memory
