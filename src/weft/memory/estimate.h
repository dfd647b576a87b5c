// Back-of-envelope arithmetic of training: time from FLOPs, cost on demand and on spot instances
// with checkpointing, and the ring all-reduce of the gradients against a step's compute. Pure
// functions over numbers; the device and link figures come from memory/devices.h.
//
// Training FLOPs = 6 x parameters x tokens: per token, the forward is a multiply and an add per
// parameter (2 P) and the backward twice that (the gradient with respect to the inputs and to the
// weights, 4 P). GPT-3: 6 x 174.6e9 x 300e9 = 3.14e23.
#pragma once
#include <cstdint>

namespace weft::memory {

double training_flops(double params, double tokens);

// Seconds for `flops` on `count` devices each reaching `mfu` (model FLOPs utilisation, in (0, 1]) of
// `peak_flops`: flops / (peak x mfu x count).
double training_seconds(double flops, double peak_flops, int64_t count, double mfu);

// What interrupting spot instances costs a run that checkpoints every `checkpoint_interval_s`.
// The model: writing a checkpoint stalls training for `checkpoint_write_s`; interruptions come at
// `interruptions_per_hour` (a Poisson rate) over the whole wall time; each one loses on average half a
// checkpoint interval of work (the time since the last checkpoint is uniform over the interval) plus
// `restart_s` to get a new instance and load the checkpoint. The wall time W then satisfies
//     W = compute + checkpoints + rate x W x (interval / 2 + restart)
// so W = (compute + checkpoints) / (1 - rate x (interval / 2 + restart)); where that denominator is
// not positive the run never finishes (finishes is false).
struct SpotRun {
  double checkpoint_s = 0;     // time spent writing checkpoints
  double interruptions = 0;    // expected number
  double lost_s = 0;           // work redone and restarts
  double wall_s = 0;           // compute + checkpoint_s + lost_s
  bool finishes = true;
  double best_interval_s = 0;  // Young's interval sqrt(2 x write x mean time between interruptions)
};
SpotRun spot_run(double compute_s, double checkpoint_interval_s, double checkpoint_write_s,
                 double interruptions_per_hour, double restart_s);

// Ring all-reduce of `bytes` over `world` ranks: 2 (n - 1) steps (reduce-scatter, then all-gather),
// each moving bytes / n over every link at once and paying the link's latency:
//     2 (n - 1) / n x bytes / bandwidth + 2 (n - 1) x latency; 0 for one rank.
double ring_allreduce_seconds(double bytes, int64_t world, double bandwidth, double latency);

}  // namespace weft::memory
