// GEMM throughput: what weft's matmul and linear layers cost on top of oneDNN, against the
// machine's theoretical peak. Prints a table; `bench_gemm` takes no arguments.
//
// Each figure is the best (and median) of several timed calls after a warm-up call; FLOPs are
// counted as 2 M N K. The bare oneDNN column creates a matmul primitive for plain row-major
// A [M, K] @ B [K, N] once and times execute(); weft::cpu::matmul is the same product through
// weft (argument checks, primitive lookup, output allocation); weft::linear takes x [M, K] and a
// weight [N, K], as a layer stores it, so oneDNN reads the weight transposed in place.
//
// Then the same shapes by number format: f32 and bf16 through weft::cpu::matmul, and int8 through
// cpu::Int8Linear (u8 x [M, K] with a per-tensor scale and zero point, i8 weights [N, K] with
// per-channel scales, s32 accumulation, f32 out), once on an already-quantized x and once
// including quantizing the f32 x, which a quantized layer pays on every call.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/core/tensor.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/int8.h"
#include "weft/kernels/cpu/matmul.h"
#include "weft/ops/linear.h"
#include "weft/quant/weights.h"

namespace {

using weft::DType;
using weft::Tensor;

struct Timing {
  double best_s, median_s;
};

Timing time_it(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: first-touch pages, primitive creation, allocator segments
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds.front(), seconds[seconds.size() / 2]};
}

// The highest clock the OS reports, in GHz, and where it came from.
std::pair<double, std::string> max_clock_ghz() {
  std::ifstream sys("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (sys >> khz && khz > 0) return {khz / 1e6, "cpuinfo_max_freq"};
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  while (std::getline(info, line))
    if (line.rfind("cpu MHz", 0) == 0) mhz = std::max(mhz, std::stod(line.substr(line.find(':') + 1)));
  return {mhz / 1e3, "/proc/cpuinfo cpu MHz"};
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// A primitive built and run with nothing of weft in between.
struct BareMatmul {
  bool recreate;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
  BareMatmul(const Tensor& ta, const Tensor& tb, Tensor& tc, bool recreate_each_call = false) : recreate(recreate_each_call) {
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    a = dnnl::memory({{ta.size(0), ta.size(1)}, f32, tag::ab}, engine, ta.data_ptr());
    b = dnnl::memory({{tb.size(0), tb.size(1)}, f32, tag::ab}, engine, tb.data_ptr());
    c = dnnl::memory({{tc.size(0), tc.size(1)}, f32, tag::ab}, engine, tc.data_ptr());
    primitive = create();
  }
  dnnl::matmul create() {
    dnnl::matmul::desc d(a.get_desc(), b.get_desc(), c.get_desc());
    return dnnl::matmul(dnnl::matmul::primitive_desc(d, engine));
  }
  void operator()() {
    dnnl::matmul p = recreate ? create() : primitive;  // oneDNN's primitive cache serves repeats
    p.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};

}  // namespace

int main() {
  const int threads = 2;
  weft::set_num_threads(threads);
  weft::NoGradGuard no_grad;
  weft::Generator gen(0);

  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8, fma_units = 2;
  auto [ghz, clock_source] = max_clock_ghz();
  const double peak = threads * ghz * 2 * lanes * fma_units;
  std::printf("weft GEMM benchmark: %s, %d threads, AVX-512 %s\n", cpu_model().c_str(), threads,
              avx512 ? "yes" : "no");
  std::printf("f32 peak = %d cores x %.3f GHz (%s) x 2 flops/FMA x %d lanes (%s) x %d FMA units/core "
              "(assumed: Zen 5 and Xeon Scalable server cores have two 512-bit FMA pipes) = %.1f GFLOP/s\n\n",
              threads, ghz, clock_source.c_str(), lanes, avx512 ? "AVX-512" : "AVX2", fma_units, peak);

  std::printf("%-11s %-28s %-34s %-34s\n", "f32 M=N=K", "bare oneDNN primitive", "weft::cpu::matmul",
              "weft::linear x[M,K] W[N,K]");
  std::printf("%-11s %-28s %-34s %-34s\n", "", "GFLOP/s best (median) %peak", "GFLOP/s best (median) %bare",
              "GFLOP/s best (median) %bare");
  struct FormatRow {
    int64_t n;
    double f32, bf16, int8, int8_from_f32;  // GFLOP/s (GOP/s for int8), best
  };
  std::vector<FormatRow> format_rows;
  for (int64_t n : {1024, 2048}) {
    const int reps = n == 1024 ? 20 : 6;
    const double flops = 2.0 * n * n * n;
    Tensor a = Tensor::randn({n, n}, gen), b = Tensor::randn({n, n}, gen), c = Tensor::empty({n, n});
    Tensor w = Tensor::randn({n, n}, gen);  // [N, K]
    BareMatmul bare(a, b, c);
    Timing t_bare = time_it([&] { bare(); }, reps);
    Timing t_weft = time_it([&] { weft::cpu::matmul(a, b); }, reps);
    Timing t_linear = time_it([&] { weft::linear(a, w); }, reps);
    auto gf = [&](double s) { return flops / s / 1e9; };
    auto cell = [&](const Timing& t, double reference) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%7.1f (%7.1f) %5.1f%%", gf(t.best_s), gf(t.median_s),
                    100.0 * gf(t.best_s) / reference);
      return std::string(buf);
    };
    std::string size = std::to_string(n) + "^3";
    std::printf("%-11s %-28s %-34s %-34s\n", size.c_str(), cell(t_bare, peak).c_str(),
                cell(t_weft, gf(t_bare.best_s)).c_str(), cell(t_linear, gf(t_bare.best_s)).c_str());

    Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16);
    Timing t_bf16 = time_it([&] { weft::cpu::matmul(a16, b16, {}, DType::f32); }, reps);
    weft::cpu::MinMax range = weft::cpu::aminmax(a);
    const weft::cpu::QuantParams a_params = weft::cpu::choose_quant_params(range.min, range.max, DType::u8);
    Tensor a8 = weft::cpu::quantize(a, a_params, DType::u8);
    weft::quant::Int8Weight w8 = weft::quant::quantize_weight_int8(w);
    weft::cpu::Int8Linear int8(w8.values, w8.scales);
    Timing t_int8 = time_it([&] { int8.forward(a8, a_params); }, reps);
    Timing t_int8_f32 = time_it([&] { int8.forward(weft::cpu::quantize(a, a_params, DType::u8), a_params); }, reps);
    format_rows.push_back({n, gf(t_weft.best_s), gf(t_bf16.best_s), gf(t_int8.best_s), gf(t_int8_f32.best_s)});
  }
  std::printf("\nBy number format, the same shapes, best GFLOP/s (int8: GOP/s) and the ratio to f32 measured in "
              "this run\n(oneDNN picks AVX512-BF16 / AVX512-VNNI, or AMX where the CPU has it):\n");
  std::printf("%-11s %-10s %-18s %-18s %-26s\n", "M=N=K", "f32", "bf16 in, f32 out", "int8 (u8 x in)",
              "int8 incl. quantizing x");
  for (const FormatRow& r : format_rows) {
    std::string size = std::to_string(r.n) + "^3";
    std::printf("%-11s %-10.1f %7.1f (%4.2fx)    %7.1f (%4.2fx)    %7.1f (%4.2fx)\n", size.c_str(), r.f32, r.bf16,
                r.bf16 / r.f32, r.int8, r.int8 / r.f32, r.int8_from_f32, r.int8_from_f32 / r.f32);
  }
  std::printf("targets: bf16 >= 1.70x f32, int8 >= 2.50x f32\n");

  // Why weft keeps its own primitive cache: for small shapes, building the primitive descriptor
  // (even when oneDNN's cache then returns the primitive) costs about as much as the GEMM.
  const int64_t s = 64;
  Tensor a = Tensor::randn({s, s}, gen), b = Tensor::randn({s, s}, gen), c = Tensor::empty({s, s});
  BareMatmul kept(a, b, c), remade(a, b, c, true);
  Timing t_kept = time_it([&] { kept(); }, 2000), t_remade = time_it([&] { remade(); }, 2000);
  Timing t_small = time_it([&] { weft::cpu::matmul(a, b); }, 2000);
  std::printf("\nf32 %lld^3, microseconds per call (median): primitive kept %.1f, recreated each call %.1f, "
              "weft::cpu::matmul %.1f\n",
              static_cast<long long>(s), t_kept.median_s * 1e6, t_remade.median_s * 1e6, t_small.median_s * 1e6);
  return 0;
}
