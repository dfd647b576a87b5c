// `weft estimate`: the back-of-envelope calculators (memory/estimate.h) over the device table
// (memory/devices.h), and --calibrate, which measures the rates they assume on this machine
// (memory/calibrate.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/error.h"
#include "weft/core/threads.h"
#include "weft/memory/calibrate.h"
#include "weft/memory/devices.h"
#include "weft/memory/estimate.h"
#include "weft/train/options.h"

namespace weft::cli {

namespace {

constexpr Accepts<double> kPositive{.min = 0, .min_open = true};
constexpr Accepts<double> kNonNegative{.min = 0};
// Dollars per device-hour: the table's dearest is $12.29 (an H100 of a p5.48xlarge); a million is no price.
// A millionth of a dollar an hour at least: below it (1e-320, say) cost ratios overflow to inf.
constexpr Accepts<double> kPrice{.min = 1e-6, .max = 1e6};

struct RunFlags {
  std::optional<double> params, tokens, flops;
  std::string device = "H100", precision = "bf16";
  int64_t count = 1;
  double mfu = 0.4;
};

struct EstimateFlags {
  RunFlags run;
  bool json = false;
  // cost
  std::optional<double> usd_per_hour, spot_usd_per_hour;
  double checkpoint_every_min = 30, checkpoint_write_s = 60, interruptions_per_hour = 0, restart_min = 5;
  // comm
  std::optional<double> bytes, batch;
  double grad_bytes = 4, topk = 0.01;
  int64_t world = 2;
  std::string link = "nvlink";
  // --calibrate
  bool calibrate = false;
  int64_t mlp_batch = 128, steps = 1000, gemm_size = 1024;
  int threads = 0;
  double seconds = 0.5;
};

void add_run_flags(CLI::App* c, RunFlags& f, bool flops_allowed) {
  parameter_count_flag(c, "--params", f.params, "model parameters (175e9, 7B)");
  number_flag(c, "--tokens", f.tokens, "tokens (or samples) trained on; FLOPs = 6 x params x tokens", kPositive);
  if (flops_allowed) number_flag(c, "--flops", f.flops, "or the training FLOPs themselves", kPositive);
  c->add_option("--device", f.device, memory::device_names())->capture_default_str();
  c->add_option("--precision", f.precision, "whose peak: bf16 | fp16 | fp32 | tf32 (f32 on the tensor cores) | int8")
      ->check(one_of({"bf16", "fp16", "fp32", "tf32", "int8"}))
      ->capture_default_str();
  number_flag(c, kGpusFlag, f.count, "devices training together", {.min = 1, .max = memory::kMaxWorld});
  number_flag(c, "--mfu", f.mfu, "model FLOPs utilisation in (0, 1]: the fraction of the peak reached (0.3-0.5 is usual)",
              {.min = 0, .max = 1, .min_open = true});
}

std::string sci(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

std::string duration(double seconds) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, "%.4g s = %.4g hours = %.4g days = %.3g years", seconds, seconds / 3600,
                seconds / 86400, seconds / (365.25 * 86400));
  return buffer;
}

struct RunEstimate {
  memory::DeviceSpec device;
  double flops, peak, seconds;
};

RunEstimate estimate_run(const RunFlags& f, const std::string& command) {
  RunEstimate e{memory::find_device(f.device), 0, 0, 0};
  if (f.flops) {
    WEFT_CHECK(!f.params && !f.tokens, ValueError, command,
               ": --flops and --params/--tokens give the FLOPs twice; give one");
    e.flops = *f.flops;
  } else {
    WEFT_CHECK(f.params && f.tokens, ValueError, command, ": give --params and --tokens, or --flops");
    e.flops = memory::training_flops(*f.params, *f.tokens);
  }
  WEFT_CHECK(std::isfinite(e.flops), ValueError, command, ": 6 x --params x --tokens is beyond a double's range "
             "(1.8e+308 FLOPs); no training is that long");
  e.peak = memory::peak_flops(e.device, f.precision);
  e.seconds = memory::training_seconds(e.flops, e.peak, f.count, f.mfu);
  WEFT_CHECK(std::isfinite(e.seconds), ValueError, command, ": ", sci(e.flops), " FLOPs at ", f.count, " x ",
             sci(e.peak), " FLOP/s x MFU ", f.mfu, " take more seconds than a double holds (1.8e+308); raise --mfu");
  return e;
}

void print_run(const RunFlags& f, const RunEstimate& e) {
  if (f.flops) std::cout << "FLOPs: " << sci(e.flops) << " (given)\n";
  else
    std::cout << "FLOPs: 6 x " << sci(*f.params) << " parameters x " << sci(*f.tokens) << " tokens = " << sci(e.flops)
              << "\n";
  std::cout << "device: " << e.device.name << ", " << f.precision << " peak " << sci(e.peak) << " FLOP/s ("
            << e.device.compute_source << ")\n";
  std::cout << "rate: " << f.count << " x " << sci(e.peak) << " x MFU " << f.mfu << " = "
            << sci(e.peak * f.count * f.mfu) << " FLOP/s\n";
  std::cout << "time: " << duration(e.seconds) << "\n";
}

nlohmann::json run_json(const RunFlags& f, const RunEstimate& e) {
  return {{"flops", e.flops},       {"device", e.device.name}, {"precision", f.precision}, {"peak_flops", e.peak},
          {"count", f.count},       {"mfu", f.mfu},            {"seconds", e.seconds},     {"hours", e.seconds / 3600},
          {"days", e.seconds / 86400}};
}

void estimate_time(const EstimateFlags& f) {
  const RunEstimate e = estimate_run(f.run, "estimate time");
  if (f.json) std::cout << run_json(f.run, e).dump() << "\n";
  else print_run(f.run, e);
}

// The spot run's cost beside the on-demand one's, in words that stay true at both ends: a cost
// below 1% of on demand is no "100% less", one above it is more, not a negative saving, and one
// of many times it is a multiple, not a percentage of hundreds of digits.
std::string against_on_demand(double spot_usd, double on_demand_usd) {
  const double share = spot_usd / on_demand_usd;
  if (share < 0.01) return str(sci(100 * share), "% of the on-demand cost");
  if (share > 10) return str(sci(share), " times the on-demand cost");
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.0f%% %s than on demand", 100 * std::abs(1 - share), share <= 1 ? "less" : "more");
  return buffer;
}

void estimate_cost(const EstimateFlags& f) {
  const RunEstimate e = estimate_run(f.run, "estimate cost");
  const double on_demand = f.usd_per_hour.value_or(e.device.usd_per_hour);
  const double spot = f.spot_usd_per_hour.value_or(e.device.spot_usd_per_hour);
  WEFT_CHECK(on_demand > 0 && spot > 0, ValueError, "estimate cost: the table has no price for ", e.device.name,
             "; give --usd-per-hour and --spot-usd-per-hour");
  // Fewer than one in 114,000 years: the time between interruptions would overflow to inf.
  WEFT_CHECK(f.interruptions_per_hour == 0 || f.interruptions_per_hour >= 1e-9, ValueError,
             "--interruptions-per-hour: must be 0 or at least 1e-09, got '", f.interruptions_per_hour, "'");
  const double device_hours = e.seconds / 3600 * static_cast<double>(f.run.count);
  WEFT_CHECK(std::isfinite(device_hours * std::max(on_demand, spot)), ValueError, "estimate cost: ", sci(device_hours),
             " device-hours at $", sci(std::max(on_demand, spot)), "/hour cost more dollars than a double holds "
             "(1.8e+308)");
  const memory::SpotRun s = memory::spot_run(e.seconds, f.checkpoint_every_min * 60, f.checkpoint_write_s,
                                             f.interruptions_per_hour, f.restart_min * 60);
  const double spot_hours = s.wall_s / 3600 * static_cast<double>(f.run.count);
  WEFT_CHECK(!s.finishes || std::isfinite(spot_hours * spot), ValueError, "estimate cost: the spot run's time or "
             "cost, with a checkpoint of --checkpoint-seconds ", f.checkpoint_write_s, " every --checkpoint-every ",
             f.checkpoint_every_min, " minutes, is beyond a double's range (1.8e+308)");
  const bool priced_here = !f.usd_per_hour && !f.spot_usd_per_hour;
  if (f.json) {
    nlohmann::json j = run_json(f.run, e);
    j.update({{"device_hours", device_hours},
              {"usd_per_hour", on_demand},
              {"spot_usd_per_hour", spot},
              {"on_demand_usd", device_hours * on_demand},
              {"spot_finishes", s.finishes},
              {"spot_wall_seconds", s.finishes ? nlohmann::json(s.wall_s) : nlohmann::json(nullptr)},
              {"spot_usd", s.finishes ? nlohmann::json(spot_hours * spot) : nlohmann::json(nullptr)},
              {"checkpoint_seconds", s.checkpoint_s},
              {"interruptions", s.interruptions},
              {"lost_seconds", s.lost_s},
              {"best_checkpoint_minutes", s.best_interval_s / 60},
              {"price_source", priced_here ? e.device.price_source : "given"},
              {"price_snapshot", memory::kPriceSnapshot}});
    std::cout << j.dump() << "\n";
    return;
  }
  print_run(f.run, e);
  std::printf("prices: $%.2f/hour on demand, $%.2f/hour spot, per device (%s)\n", on_demand, spot,
              priced_here ? str(e.device.price_source, "; list prices as of ", memory::kPriceSnapshot, ", not re-checked since: --usd-per-hour overrides").c_str() : "given");
  std::printf("on demand: %.4g device-hours x $%.2f = $%.4g\n", device_hours, on_demand, device_hours * on_demand);
  std::printf("spot, checkpoint every %g min (%g s to write), %g interruptions/hour, %g min to restart:\n",
              f.checkpoint_every_min, f.checkpoint_write_s, f.interruptions_per_hour, f.restart_min);
  if (!s.finishes) {
    std::printf("  never finishes: each interruption loses %g min (half an interval + restart) and they come every %g min;"
                " checkpoint more often\n",
                f.checkpoint_every_min / 2 + f.restart_min, 60 / f.interruptions_per_hour);
    return;
  }
  std::printf("  checkpoints %.4g hours, %.4g interruptions losing %.4g hours (half an interval + restart each)\n",
              s.checkpoint_s / 3600, s.interruptions, s.lost_s / 3600);
  std::printf("  wall %.4g hours = %.4g days: %.4g device-hours x $%.2f = $%.4g (%s)\n", s.wall_s / 3600,
              s.wall_s / 86400, spot_hours, spot, spot_hours * spot,
              against_on_demand(spot_hours * spot, device_hours * on_demand).c_str());
  if (s.best_interval_s > 0)
    std::printf("  the interval that loses least, sqrt(2 x write x time between interruptions): %.3g min\n",
                s.best_interval_s / 60);
}

void estimate_comm(const EstimateFlags& f) {
  const memory::LinkSpec link = memory::find_link(f.link);
  const std::optional<double>& params = f.run.params;
  WEFT_CHECK(f.bytes || params, ValueError, "estimate comm: give --bytes, or --params (gradients of --grad-bytes each)");
  const double bytes = f.bytes ? *f.bytes : *params * f.grad_bytes;
  const double n = static_cast<double>(f.world);
  const double bandwidth_s = 2 * (n - 1) / n * bytes / link.bandwidth, latency_s = 2 * (n - 1) * link.latency;
  const double comm_s = memory::ring_allreduce_seconds(bytes, f.world, link.bandwidth, link.latency);
  WEFT_CHECK(std::isfinite(1.5 * comm_s), ValueError, "estimate comm: ", sci(bytes), " bytes over ", f.world,
             " ranks take more seconds to all-reduce than a double holds (1.8e+308); give fewer --bytes");
  nlohmann::json j = {{"bytes", bytes}, {"world", f.world}, {"link", link.name}, {"link_bandwidth", link.bandwidth},
                      {"link_latency", link.latency}, {"allreduce_seconds", comm_s}};
  std::ostringstream text;
  text << "ring all-reduce of " << sci(bytes) << " bytes over " << f.world << " ranks on " << link.name << " ("
       << sci(link.bandwidth) << " B/s, " << sci(link.latency * 1e6) << " us: " << link.source << ")\n"
       << "  2(n-1)/n x S/B = " << sci(bandwidth_s) << " s, + 2(n-1) x latency = " << sci(latency_s) << " s: "
       << sci(comm_s) << " s per step\n";
  if (f.batch) {
    WEFT_CHECK(params, ValueError, "estimate comm: --batch-tokens needs --params for the step's compute");
    const memory::DeviceSpec device = memory::find_device(f.run.device);
    const double peak = memory::peak_flops(device, f.run.precision);
    const double compute_s = memory::training_flops(*params, *f.batch / n) / (peak * f.run.mfu);
    WEFT_CHECK(std::isfinite(compute_s), ValueError, "estimate comm: the step's compute, 6 x --params x --batch-tokens "
               "per rank / (peak x --mfu), takes more seconds than a double holds (1.8e+308)");
    const bool bound = comm_s > compute_s;
    j.update({{"compute_seconds", compute_s}, {"communication_bound", bound}});
    text << "compute: 6 x " << sci(*params) << " x " << sci(*f.batch / n) << " tokens per rank / (" << device.name << " "
         << f.run.precision << " " << sci(peak) << " x MFU " << f.run.mfu << ") = " << sci(compute_s) << " s per step\n"
         << (bound ? "communication is the bottleneck: " : "compute is the bottleneck: ") << "all-reduce "
         << sci(comm_s) << " s vs compute " << sci(compute_s) << " s (" << sci(comm_s / compute_s)
         << "x; DDP overlaps the two at best, adds them at worst)\n";
  }
  // Compressed gradients shrink S; ZeRO changes what is sent, not the link.
  const double one_bit_s = memory::ring_allreduce_seconds(bytes / (8 * f.grad_bytes), f.world, link.bandwidth, link.latency);
  const double topk_s = memory::ring_allreduce_seconds(2 * f.topk * bytes, f.world, link.bandwidth, link.latency);
  const double zero3_s = 1.5 * comm_s;
  j.update({{"one_bit_seconds", one_bit_s}, {"topk_ratio", f.topk}, {"topk_seconds", topk_s},
            {"zero12_seconds", comm_s}, {"zero3_seconds", zero3_s}});
  text << "what would change it:\n"
       << "  1-bit compression (1 bit per " << f.grad_bytes << "-byte gradient, error feedback): " << sci(one_bit_s) << " s\n"
       << "  top-k " << f.topk << " (value + index per kept gradient, 2 x ratio x S): " << sci(topk_s) << " s\n"
       << "  ZeRO-1/2: the same volume (reduce-scatter of gradients + all-gather of parameters): " << sci(comm_s) << " s\n"
       << "  ZeRO-3: 1.5x (parameters gathered in the forward and again in the backward): " << sci(zero3_s) << " s\n";
  if (f.json) std::cout << j.dump() << "\n";
  else std::cout << text.str();
}

void calibrate(const EstimateFlags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
  const memory::DeviceSpec cpu = memory::find_device("cpu");
  const int threads = get_num_threads();
  const int64_t cores = memory::cpu_cores();
  // The peak of the cores the threads can use: one thread reaches one core's FMA units at most.
  const double peak = cpu.peak.fp32 * static_cast<double>(std::min<int64_t>(threads, cores)) / static_cast<double>(cores);
  const memory::GemmRate square = memory::measure_square_gemm(f.gemm_size, f.seconds);
  const memory::GemmRate mlp = memory::measure_mlp_step_gemms(f.mlp_batch, f.seconds);
  const memory::AllReduceMeasurement ar = memory::measure_allreduce(int64_t{64} << 20, f.seconds);
  const double params = static_cast<double>(memory::mlp_parameters());
  const double steps = static_cast<double>(f.steps);
  const double samples = static_cast<double>(f.mlp_batch) * steps;
  // The estimate: the step's own GEMMs at the rate they reached here and the optimizer's pass at the
  // measured bandwidth; beside it the datasheet arithmetic, 6 P T at the peak and at the square GEMM's rate.
  const double step_s = memory::mlp_step_seconds(mlp, ar.copy_bandwidth);
  const double peak_rule_s = memory::training_seconds(memory::training_flops(params, samples), peak, 1, 1);
  const double square_rule_s =
      memory::training_seconds(memory::training_flops(params, samples), square.flops_per_s(), 1, 1);
  if (f.json) {
    std::cout << nlohmann::json{{"cpu_peak_flops", cpu.peak.fp32},
                                {"threads", threads},
                                {"cores", cores},
                                {"threads_peak_flops", peak},
                                {"gemm_size", f.gemm_size},
                                {"gemm_flops_per_s", square.flops_per_s()},
                                {"gemm_mfu", square.flops_per_s() / peak},
                                {"mlp_batch", f.mlp_batch},
                                {"mlp_params", memory::mlp_parameters()},
                                {"mlp_step_flops", mlp.flops},
                                {"mlp_gemm_flops_per_s", mlp.flops_per_s()},
                                {"mlp_gemm_seconds", mlp.seconds},
                                {"mlp_step_seconds", step_s},
                                {"steps", f.steps},
                                {"mlp_train_seconds", step_s * steps},
                                {"peak_rule_seconds", peak_rule_s},
                                {"square_gemm_rule_seconds", square_rule_s},
                                {"allreduce_bytes", ar.bytes},
                                {"copy_bandwidth", ar.copy_bandwidth},
                                {"allreduce_seconds", ar.measured_s},
                                {"allreduce_formula_seconds", ar.formula_s}}
                     .dump()
              << "\n";
    return;
  }
  std::printf("cpu: fp32 peak %s FLOP/s = %s\n", sci(cpu.peak.fp32).c_str(), cpu.compute_source.c_str());
  std::printf("  %d thread%s: the peak of %lld of %lld cores, %s FLOP/s\n", threads, threads == 1 ? "" : "s",
              static_cast<long long>(std::min<int64_t>(threads, cores)), static_cast<long long>(cores),
              sci(peak).c_str());
  std::printf("GEMM %lld^3 f32: %s FLOP/s measured = %.1f%% of that peak (the MFU a large GEMM reaches)\n",
              static_cast<long long>(f.gemm_size), sci(square.flops_per_s()).c_str(), 100 * square.flops_per_s() / peak);
  std::printf("MLP step GEMMs, batch %lld (%s FLOPs: forward, weight and input gradients, none for the data): "
              "%s FLOP/s = %.1f%% of that peak, %.3g ms\n",
              static_cast<long long>(f.mlp_batch), sci(mlp.flops).c_str(), sci(mlp.flops_per_s()).c_str(),
              100 * mlp.flops_per_s() / peak, 1e3 * mlp.seconds);
  if (std::max(square.flops_per_s(), mlp.flops_per_s()) > peak)
    std::printf("  (above 100%%: the cores run faster than the frequency the OS reports, so that peak is a floor)\n");
  std::printf("copy bandwidth %s B/s (%s bytes); AdamW's %g bytes per parameter: %.3g ms a step\n",
              sci(ar.copy_bandwidth).c_str(), sci(ar.bytes).c_str(), memory::kAdamwBytesPerParam,
              1e3 * (step_s - mlp.seconds));
  std::printf("all-reduce of %s bytes, two ranks in memory: %.3g ms measured; the ring formula at the copy bandwidth: "
              "%.3g ms (%.2fx: a sum reads two buffers where the formula counts the bytes sent once)\n",
              sci(ar.bytes).c_str(), 1e3 * ar.measured_s, 1e3 * ar.formula_s, ar.measured_s / ar.formula_s);
  std::printf("weft train --model mlp --batch-size %lld --steps %lld --threads %d (%s parameters), estimated:\n",
              static_cast<long long>(f.mlp_batch), static_cast<long long>(f.steps), threads, sci(params).c_str());
  std::printf("  from the measured rates: %.3g ms a step, %.4g s\n", 1e3 * step_s, step_s * steps);
  std::printf("  6 x P x samples at the %lld^3 GEMM's rate: %.4g s (%.2fx)\n", static_cast<long long>(f.gemm_size),
              square_rule_s, square_rule_s / (step_s * steps));
  std::printf("  6 x P x samples at the peak: %.4g s (%.2fx)\n", peak_rule_s, peak_rule_s / (step_s * steps));
}

}  // namespace

void add_estimate_command(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<EstimateFlags>();
  CLI::App* c = app.add_subcommand(
      "estimate",
      "back-of-envelope training arithmetic from the device table (peak FLOPS, bandwidth, prices, links, each with\n"
      "its source): time, cost and communication; --calibrate measures this machine's GEMM and all-reduce rates.");
  c->require_subcommand(0, 1);
  c->add_flag("--calibrate", f->calibrate,
              "measure weft's GEMM (square and the MLP's step) and a two-rank all-reduce here, against the CPU's "
              "peak and the ring formula, and estimate `weft train --model mlp` from them");
  number_flag(c, "--batch-size", f->mlp_batch, "--calibrate: the MLP's batch", {.min = 1, .max = train::kMaxCount});
  number_flag(c, "--steps", f->steps, "--calibrate: the MLP's steps to estimate", {.min = 1, .max = train::kMaxSteps});
  number_flag(c, "--gemm-size", f->gemm_size, "--calibrate: the square GEMM's side", {.min = 1, .max = 8192});
  number_flag(c, "--threads", f->threads, "--calibrate: threads (0: weft's default, as weft train)",
              {.min = 0, .max = train::kMaxThreads});
  number_flag(c, "--seconds", f->seconds, "--calibrate: time each measurement about this long", {.min = 0, .max = 60});
  c->add_flag("--json", f->json, "print one JSON object on the last line");

  CLI::App* time = c->add_subcommand("time", "training time: FLOPs (6 x params x tokens) / (peak x MFU x count)");
  add_run_flags(time, f->run, true);
  time->add_flag("--json", f->json, "print one JSON object on the last line (flops, seconds, days, ...)");

  CLI::App* cost = c->add_subcommand(
      "cost",
      "the run's cost on demand and on spot instances. Spot interruptions: each loses on average half a checkpoint\n"
      "interval of work plus the restart, and writing a checkpoint stalls training; the wall time W solves\n"
      "W = compute + checkpoints + rate x W x (interval / 2 + restart).");
  add_run_flags(cost, f->run, true);
  number_flag(cost, "--usd-per-hour", f->usd_per_hour, "on-demand price per device-hour (default: the table's)",
              kPrice);
  number_flag(cost, "--spot-usd-per-hour", f->spot_usd_per_hour, "spot price per device-hour (default: the table's)",
              kPrice);
  number_flag(cost, "--checkpoint-every", f->checkpoint_every_min, "minutes between checkpoints", kPositive);
  number_flag(cost, "--checkpoint-seconds", f->checkpoint_write_s, "seconds one checkpoint stalls training", kNonNegative);
  number_flag(cost, "--interruptions-per-hour", f->interruptions_per_hour, "spot interruptions per hour", kNonNegative);
  number_flag(cost, "--restart-minutes", f->restart_min, "minutes from an interruption to training again", kNonNegative);
  cost->add_flag("--json", f->json, "print one JSON object on the last line");

  CLI::App* comm = c->add_subcommand(
      "comm",
      "ring all-reduce time per step, 2(n-1)/n x S/B + 2(n-1) x latency, against the step's compute\n"
      "(6 x params x tokens per rank / (peak x MFU)) when --params and --batch-tokens are given, and what gradient\n"
      "compression or ZeRO would change");
  number_flag(comm, "--bytes", f->bytes, "bytes all-reduced per step (default: --params x --grad-bytes)", kPositive);
  number_flag(comm, kGpusFlag, f->world, "ranks in the ring, a device each", {.min = 1, .max = memory::kMaxWorld});
  comm->add_option("--link", f->link, memory::link_names())->capture_default_str();
  parameter_count_flag(comm, "--params", f->run.params, "model parameters (1.5e9, 7B)");
  number_flag(comm, "--grad-bytes", f->grad_bytes, "bytes per gradient (4: fp32, 2: bf16)",
              {.min = 0, .max = 8, .min_open = true});
  number_flag(comm, "--batch-tokens,--batch", f->batch, "tokens (or samples) per step over all ranks", kPositive);
  comm->add_option("--device", f->run.device, memory::device_names())->capture_default_str();
  comm->add_option("--precision", f->run.precision, "bf16 | fp16 | fp32 | tf32 | int8")
      ->check(one_of({"bf16", "fp16", "fp32", "tf32", "int8"}))
      ->capture_default_str();
  number_flag(comm, "--mfu", f->run.mfu, "model FLOPs utilisation in (0, 1]", {.min = 0, .max = 1, .min_open = true});
  number_flag(comm, "--topk", f->topk, "top-k compression's kept fraction", {.min = 0, .max = 1, .min_open = true});
  comm->add_flag("--json", f->json, "print one JSON object on the last line");

  c->callback([&run, f, time, cost, comm] {
    if (time->parsed()) run = [f] { estimate_time(*f); };
    else if (cost->parsed()) run = [f] { estimate_cost(*f); };
    else if (comm->parsed()) run = [f] { estimate_comm(*f); };
    else if (f->calibrate) run = [f] { calibrate(*f); };
    else throw ValueError("estimate: give time, cost, comm or --calibrate (see weft estimate --help)");
  });
}

}  // namespace weft::cli
