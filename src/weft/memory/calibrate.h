// `weft estimate --calibrate`: the rates the estimates assume, measured on this machine with weft's
// own kernels, so that an estimate can use what the machine reaches instead of its datasheet.
//   - GEMM: cpu::matmul in f32, a square product (the rate large layers reach) and the GEMMs of one
//     training step of `weft train --model mlp` at its batch size, with their real shapes and
//     transposes (forward x W^T, the weights' gradient g^T x, the inputs' gradient g W), since small
//     GEMMs run well below the square one's rate.
//   - memory: the copy bandwidth of a buffer larger than the caches, and a two-rank ring all-reduce
//     done in this process (each rank a buffer, the link the memory bus: reduce-scatter adds the
//     other rank's half, all-gather copies it back), against the ring formula at that bandwidth.
#pragma once
#include <cstdint>
#include <vector>

namespace weft::memory {

// One Linear layer of a model: in x out weights (the bias is an add, not a GEMM).
struct LinearShape {
  int64_t in, out;
};

// The Linear layers of weft's MLP (nn::make_mlp), in order, and its parameter count.
std::vector<LinearShape> mlp_linears();
int64_t mlp_parameters();

// The bytes AdamW moves per parameter in a step: it reads the parameter, its gradient and both
// moments (16) and writes the parameter and both moments (12), and the gradient is zeroed for the
// next step (4). The MLP's step is this pass plus its GEMMs; the rest (ReLU, the loss, the bias sums)
// is a few hundred thousand elements and left out.
inline constexpr double kAdamwBytesPerParam = 32;

// The GEMM FLOPs of one training step over `batch` samples: per layer 2 x batch x in x out for the
// forward, the same for the weights' gradient, and the same again for the inputs' gradient except in
// the first layer, whose input (the data) needs none. Below 6 x parameters x batch by that layer.
double mlp_step_flops(int64_t batch);

struct GemmRate {
  double flops = 0;    // per call
  double seconds = 0;  // per call, the fastest of the timed calls
  double flops_per_s() const { return flops / seconds; }
};

// m x k times k x n, f32, timed for about `min_seconds` after one warm-up call.
GemmRate measure_square_gemm(int64_t size, double min_seconds);
// The GEMMs of mlp_step_flops(batch), timed together as a step's.
GemmRate measure_mlp_step_gemms(int64_t batch, double min_seconds);

struct AllReduceMeasurement {
  double bytes = 0;
  double copy_bandwidth = 0;  // bytes copied per second by memcpy of `bytes` (it reads and writes each)
  double measured_s = 0;      // the two-rank ring all-reduce in this process
  double formula_s = 0;       // ring_allreduce_seconds(bytes, 2, copy_bandwidth, 0)
};
AllReduceMeasurement measure_allreduce(int64_t bytes, double min_seconds);

// One step of `weft train --model mlp` (AdamW, f32) estimated from measured rates: the step's GEMMs
// at the rate they reached, plus the optimizer's kAdamwBytesPerParam x parameters at the memory's
// traffic rate (a copy moves its bytes twice: read and write).
double mlp_step_seconds(const GemmRate& step_gemms, double copy_bandwidth);

}  // namespace weft::memory
