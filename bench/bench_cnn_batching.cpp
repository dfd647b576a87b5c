// What batching buys the built-in CNN's forward alone, on the one thread `weft serve` computes on
// (bench/serve_load.py measures the server around it): microseconds per image at batch 1 and at
// batch 32, and their ratio, the most that dynamic batching can raise the served requests/s by
// when the forward is all a request costs. Median of many calls after a warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/models.h"

int main() {
  weft::set_num_threads(1);
  weft::manual_seed(0);
  weft::NoGradGuard no_grad;
  auto cnn = weft::nn::make_cnn();
  cnn->eval();
  weft::Generator gen(1);
  auto us_per_image = [&](int64_t batch) {
    const weft::Tensor x = weft::Tensor::randn({batch, 1, 28, 28}, gen);
    for (int i = 0; i < 20; ++i) (*cnn)(x);  // primitives, allocator segments
    std::vector<double> us;
    for (int i = 0; i < 4000 / batch + 50; ++i) {
      const auto start = std::chrono::steady_clock::now();
      (*cnn)(x);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(us.begin(), us.begin() + std::ssize(us) / 2, us.end());
    return us[us.size() / 2] / static_cast<double>(batch);
  };
  const double one = us_per_image(1), batched = us_per_image(32);
  std::printf("weft CNN forward, 1 thread, microseconds per image (median)\n");
  std::printf("batch 1   %8.1f\nbatch 32  %8.1f\nbatching: %.1fx the images/s of batch 1\n", one, batched, one / batched);
  return 0;
}
