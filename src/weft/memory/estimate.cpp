#include "weft/memory/estimate.h"

#include <cmath>

namespace weft::memory {

double training_flops(double params, double tokens) { return 6 * params * tokens; }

double training_seconds(double flops, double peak_flops, int64_t count, double mfu) {
  return flops / (peak_flops * mfu * static_cast<double>(count));
}

SpotRun spot_run(double compute_s, double checkpoint_interval_s, double checkpoint_write_s,
                 double interruptions_per_hour, double restart_s) {
  SpotRun run;
  const double rate = interruptions_per_hour / 3600;  // per second
  run.checkpoint_s = std::floor(compute_s / checkpoint_interval_s) * checkpoint_write_s;
  const double lost_per_interruption = checkpoint_interval_s / 2 + restart_s;
  const double useful_fraction = 1 - rate * lost_per_interruption;
  if (rate > 0) run.best_interval_s = std::sqrt(2 * checkpoint_write_s / rate);
  if (useful_fraction <= 0) {
    run.finishes = false;
    return run;
  }
  run.wall_s = (compute_s + run.checkpoint_s) / useful_fraction;
  run.interruptions = rate * run.wall_s;
  run.lost_s = run.interruptions * lost_per_interruption;
  return run;
}

double ring_allreduce_seconds(double bytes, int64_t world, double bandwidth, double latency) {
  const double n = static_cast<double>(world);
  return 2 * (n - 1) / n * bytes / bandwidth + 2 * (n - 1) * latency;
}

}  // namespace weft::memory
