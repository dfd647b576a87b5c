// This machine's two ceilings, measured, for the profiler's compute- or memory-bound verdicts:
// the GEMM rate weft's matmul reaches (f32, and bf16 where the CPU has bf16 instructions) and the
// memory bandwidth a streaming loop reaches. Each figure is the best of eight runs (0.1-0.3 s in
// all), on the threads weft is set to use: what weft's own kernels can get, not the vendor's peak,
// and on a busy machine less than that.
#pragma once
#include "weft/monitor/profiler.h"

namespace weft::cpu {

struct RooflineFigures {
  double f32_gflops = 0;
  double bf16_gflops = 0;    // 0 where oneDNN has no native bf16 kernels on this CPU
  double bandwidth_gbs = 0;  // a triad a[i] = b[i] + s * c[i] over 3 x 64 MiB: 2 reads and a write
};

RooflineFigures measure_roofline();

// The roofline an f32 (or bf16) run is judged against.
monitor::Roofline roofline_for(const RooflineFigures& figures, DType compute_dtype = DType::f32);

}  // namespace weft::cpu
