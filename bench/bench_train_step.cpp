// One training step of the MLP 784-512-256-10 at batch 128, split into forward (incl. loss),
// backward and optimizer time, with the allocator's peak beside it. When Debian's PyTorch is
// installed, bench/torch_train_step.py measures the same step in the same run (2 threads,
// OpenBLAS on its AVX-512 kernels, one OpenBLAS thread: PyTorch's best configuration here).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/layers.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  set_num_threads(2);
  manual_seed(0);
  const int64_t batch = 128;
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10));
  optim::AdamW opt(model->parameters(), {});
  Tensor x = Tensor::randn({batch, 784});
  Tensor y = Tensor::from_vector(std::vector<int64_t>(batch, 3), {batch});
  for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % 10;

  std::vector<double> fwd, bwd, step;
  for (int it = 0; it < 220; ++it) {
    auto t0 = Clock::now();
    Tensor loss = cross_entropy((*model)(x), y);
    double f = seconds_since(t0);
    t0 = Clock::now();
    loss.backward();
    double b = seconds_since(t0);
    t0 = Clock::now();
    opt.step();
    opt.zero_grad();
    double s = seconds_since(t0);
    if (it >= 20) fwd.push_back(f), bwd.push_back(b), step.push_back(s);  // first steps warm caches
  }
  double f = median(fwd) * 1e3, b = median(bwd) * 1e3, s = median(step) * 1e3;
  MemoryStats stats = CachingAllocator::cpu().stats();
  std::printf("MLP 784-512-256-10, batch %lld, AdamW, %d threads (median of 200 steps)\n",
              static_cast<long long>(batch), get_num_threads());
  std::printf("%-10s %10s %10s %10s %10s %12s\n", "", "forward", "backward", "optimizer", "step", "samples/s");
  std::printf("%-10s %8.3fms %8.3fms %8.3fms %8.3fms %12.0f\n", "weft", f, b, s, f + b + s, batch / ((f + b + s) / 1e3));
  std::string script = std::string(argc > 1 ? argv[1] : "bench") + "/torch_train_step.py";
  std::string cmd = "OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 " + script + " 2>/dev/null";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, p)) std::fputs(line, stdout);
    pclose(p);
  }
  std::printf("allocator peak: %s allocated, %s reserved\n", format_bytes(stats.peak_allocated_bytes).c_str(),
              format_bytes(stats.peak_reserved_bytes).c_str());
}
