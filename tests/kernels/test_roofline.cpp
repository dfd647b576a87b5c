#include "weft/kernels/cpu/roofline.h"

#include <gtest/gtest.h>

using namespace weft;

TEST(Roofline, MeasuresBothCeilingsAndPicksTheOneForTheComputeType) {
  const cpu::RooflineFigures f = cpu::measure_roofline();
  EXPECT_GT(f.f32_gflops, 0);
  EXPECT_GT(f.bandwidth_gbs, 0);
  EXPECT_GE(f.bf16_gflops, 0);
  const monitor::Roofline f32 = cpu::roofline_for(f, DType::f32);
  EXPECT_EQ(f32.peak_gflops, f.f32_gflops);
  EXPECT_EQ(f32.bandwidth_gbs, f.bandwidth_gbs);
  const monitor::Roofline bf16 = cpu::roofline_for(f, DType::bf16);
  EXPECT_EQ(bf16.peak_gflops, f.bf16_gflops > 0 ? f.bf16_gflops : f.f32_gflops);
}
