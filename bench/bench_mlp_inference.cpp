// Inference of the built-in MLP (Flatten, 784-512-256-10 with ReLU) in f32 and quantized, at
// batch 128 and batch 1, 2 threads. `bench_mlp_inference` prints a table; `--json` prints one
// JSON object instead, which bench/mlp_inference_vs_pytorch.py puts beside PyTorch's f32 and
// quantize_dynamic figures measured in the same run.
//
// Variants: f32 (nn::Linear on oneDNN), int8 static (activation scales from 4 calibration
// batches), int8 dynamic (activation scales measured per batch, as torch's quantize_dynamic),
// int4 weight-only. The weights are the seeded random initialisation: speed does not depend on
// their values. Each figure is the median (and best) microseconds per forward over many calls
// after a warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/nn/models.h"
#include "weft/quant/ptq.h"

namespace {

using weft::Tensor;
using Clock = std::chrono::steady_clock;

struct Timing {
  double median_us, best_us;
};

Timing time_forward(const std::function<void()>& forward, int reps) {
  for (int i = 0; i < 10; ++i) forward();  // primitives, packed weights, allocator segments
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    forward();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front()};
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  const int threads = 2;
  weft::set_num_threads(threads);
  weft::manual_seed(0);
  weft::NoGradGuard no_grad;
  auto f32 = weft::nn::make_mlp();
  f32->eval();
  weft::Generator gen(1);
  std::vector<Tensor> calibration;
  for (int i = 0; i < 4; ++i) calibration.push_back(Tensor::randn({128, 1, 28, 28}, gen));
  const std::vector<std::pair<std::string, std::shared_ptr<weft::nn::Sequential>>> variants = {
      {"f32", f32},
      {"int8 static", weft::quant::quantize_static(*f32, calibration)},
      {"int8 dynamic", weft::quant::quantize_dynamic(*f32)},
      {"int4 weight-only", weft::quant::quantize_int4(*f32)}};

  nlohmann::json out = {{"threads", threads}, {"results", nlohmann::json::array()}};
  if (!json)
    std::printf("weft MLP 784-512-256-10 inference, %d threads, microseconds per forward: median (best)\n%-18s %-8s %-22s %s\n",
                threads, "variant", "batch", "us", "speed-up vs f32");
  for (int64_t batch : {128, 1}) {
    Tensor x = Tensor::randn({batch, 1, 28, 28}, gen);
    const int reps = batch == 1 ? 3000 : 400;
    double f32_us = 0;
    for (const auto& [name, model] : variants) {
      Timing t = time_forward([&, &model = model] { (*model)(x); }, reps);
      if (name == "f32") f32_us = t.median_us;
      out["results"].push_back({{"variant", name}, {"batch", batch}, {"median_us", t.median_us}, {"best_us", t.best_us}});
      if (!json)
        std::printf("%-18s %-8lld %8.1f (%8.1f)    %5.2fx\n", name.c_str(), static_cast<long long>(batch), t.median_us,
                    t.best_us, f32_us / t.median_us);
    }
  }
  if (json) std::printf("%s\n", out.dump().c_str());
  else std::printf("target: int8 >= 2x f32\n");
  return 0;
}
