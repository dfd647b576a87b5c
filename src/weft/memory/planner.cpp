#include "weft/memory/planner.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "weft/core/allocator.h"
#include "weft/core/flag_value.h"
#include "weft/core/error.h"

namespace weft::memory {

namespace {

// Data parallelism beyond this many devices is not a plan anyone runs; the search stops there.
constexpr int64_t kMaxWorld = int64_t{1} << 20;

int64_t divide_up(int64_t bytes, int64_t parts) { return bytes / parts + (bytes % parts != 0); }

ActivationFormat activation_format(Precision precision) {
  switch (precision) {
    case Precision::fp32: return {4, 4};
    case Precision::fp16:
    case Precision::bf16: return {2, 4};
    case Precision::bf16_pure: return {2, 2};
  }
  return {};
}

void check_request(const PlanRequest& r) {
  check_flag("--world", r.world, {.min = 1});
  check_flag("--zero", r.zero, {.min = 0, .max = 3});
  check_flag("--batch", r.batch, {.min = 1});
  WEFT_CHECK(r.batch % r.world == 0, ValueError, "--world: must divide --batch (", r.batch,
             ") so that data parallelism gives each device batch / world samples, got '", r.world, "'");
}

// The plan without the search for a configuration that fits.
Plan plan_as_requested(const ModelDescription& model, const PlanRequest& r) {
  check_request(r);
  Plan plan;
  plan.request = r;
  plan.per_device_batch = r.batch / r.world;
  plan.per_parameter = bytes_per_parameter(r.precision, r.optimizer);
  const int64_t psi = model.num_parameters();
  // A state sharded by ZeRO is one flat buffer per device; otherwise each parameter tensor has its
  // own, as the allocator hands it out (when the tensors are known).
  auto state_bytes = [&](int64_t element, int64_t buffers, int stage) {
    int64_t total = 0;
    WEFT_CHECK(!__builtin_mul_overflow(psi, element * buffers, &total), ValueError, "plan: ", psi,
               " parameters are more than this planner can count in bytes");
    if (r.zero >= stage) return divide_up(total, r.world);
    if (model.parameter_tensors().empty() || buffers == 0) return total;
    int64_t blocks = 0;
    for (int64_t numel : model.parameter_tensors()) blocks += buffers * fresh_block_bytes(numel * element);
    plan.rounding_bytes += blocks - total;
    return blocks;
  };
  const BytesPerParameter& per = plan.per_parameter;
  plan.optimizer_bytes = state_bytes(per.optimizer_element, per.optimizer / per.optimizer_element, 1);
  plan.grads_bytes = state_bytes(per.grads, 1, 2);
  plan.params_bytes = state_bytes(per.params, 1, 3);
  if (r.zero == 3 && r.world > 1) {
    const int64_t unit = model.largest_unit_parameters() * (plan.per_parameter.params + plan.per_parameter.grads);
    plan.gathered_bytes = unit - divide_up(unit, r.world);
  }
  const int64_t resident = plan.params_bytes + plan.optimizer_bytes + plan.gathered_bytes;
  plan.activations_known = model.knows_activations();
  if (plan.activations_known) {
    ActivationTape tape = model.step_tape(plan.per_device_batch, activation_format(r.precision), r.checkpoint_activations);
    plan.activations_bytes = tape.replay().bytes;
    ActivationTape::Peak peak = tape.replay({.resident_bytes = resident,
                                             .grad_bytes_per_param = static_cast<double>(plan.grads_bytes) / psi,
                                             .grads_alive_in_forward = true});
    plan.total_bytes = peak.bytes;
    plan.peak_at = peak.where;
  } else {
    plan.total_bytes = resident + plan.grads_bytes;
    plan.peak_at = "the optimizer step (activations not included)";
  }
  plan.device = find_device(r.device);
  plan.fits = plan.total_bytes <= plan.device.memory_bytes;
  plan.model_size_bytes = psi * 4;
  plan.chart = strategy_chart_row(plan.model_size_bytes);
  return plan;
}

// The ladder of changes tried, each on top of the ones before it.
std::optional<Plan> first_that_fits(const ModelDescription& model, const Plan& plan) {
  PlanRequest r = plan.request;
  auto fits = [&](const PlanRequest& candidate) -> std::optional<Plan> {
    Plan p = plan_as_requested(model, candidate);
    if (p.fits) return p;
    return std::nullopt;
  };
  if (r.precision == Precision::fp32) {
    r.precision = Precision::bf16;
    if (auto p = fits(r)) return p;
  }
  if (r.world > 1)
    for (int stage = r.zero + 1; stage <= 3; ++stage) {
      r.zero = stage;
      if (auto p = fits(r)) return p;
    }
  if (!r.checkpoint_activations && model.knows_activations()) {
    r.checkpoint_activations = true;
    if (auto p = fits(r)) return p;
  }
  r.zero = 3;
  for (int64_t world = r.world * 2; world <= kMaxWorld; world *= 2) {
    if (plan.per_device_batch > std::numeric_limits<int64_t>::max() / world) break;
    r.batch = plan.per_device_batch * world;
    r.world = world;
    if (auto p = fits(r)) return p;
  }
  return std::nullopt;
}

}  // namespace

BytesPerParameter bytes_per_parameter(Precision precision, OptimizerKind optimizer) {
  // Optimizer state per parameter in the precision's own terms: how many f32 or 16-bit buffers.
  const int64_t buffers = optim::state_buffers(optimizer);
  switch (precision) {
    case Precision::fp32: return {4, 4, 4 * buffers, 4};
    case Precision::fp16:
    case Precision::bf16: return {2, 2, 4 + 4 * buffers, 4};  // the f32 master weights, then the buffers in f32
    case Precision::bf16_pure: return {2, 2, 2 * buffers, 2};
  }
  return {};
}

const ChartRow& strategy_chart_row(int64_t model_size_bytes) {
  static const ChartRow rows[] = {
      {"< 1GB", "Single GPU, FP32"},
      {"1-10GB", "Single GPU, mixed precision"},
      {"10-40GB", "DDP (2-4 GPUs), mixed precision"},
      {"40-100GB", "FSDP (4-8 GPUs), BF16"},
      {"100GB-1TB", "FSDP (8+ GPUs), BF16, gradient checkpointing"},
      {"> 1TB", "Tensor parallelism + pipeline + FSDP"},
  };
  constexpr int64_t kGB = 1000 * 1000 * 1000;
  const int64_t upper[] = {kGB, 10 * kGB, 40 * kGB, 100 * kGB, 1000 * kGB};
  for (int i = 0; i < 5; ++i)
    if (model_size_bytes < upper[i]) return rows[i];
  return rows[5];
}

Plan make_plan(const ModelDescription& model, PlanRequest request) {
  if (request.batch == 0) {
    check_flag("--world", request.world, {.min = 1});
    request.batch = model.default_batch() * request.world;
  }
  Plan plan = plan_as_requested(model, request);
  const PlanRequest& r = plan.request;
  if (r.zero > 0 && r.world == 1)
    plan.notes.push_back("ZeRO shards over --world devices; on one device it divides nothing");
  if (!plan.activations_known)
    plan.notes.push_back("activations are not included: a parameter count says nothing about them; describe the "
                         "architecture (--model, or --layers --hidden --heads --vocab --seq) to count them");
  if (r.precision != Precision::fp32 && plan.activations_known)
    plan.notes.push_back("16-bit activations follow autocast's rules (softmax and the loss in f32); the layout "
                         "priced here (16-bit parameters and gradients, f32 master weights in the optimizer) is weft "
                         "train's --master-weights; without it weft train keeps f32 parameters and gradients and a "
                         "16-bit copy of every weight, 4 + 4 + 8 + 2 = 18 bytes per parameter with Adam");
  if (r.checkpoint_activations)
    plan.notes.push_back("checkpointing keeps each block's input and recomputes one block at a time during the "
                         "backward (the standard estimate); weft's own checkpointing is not measured yet");
  if (plan.fits) return plan;
  if (std::optional<Plan> fitting = first_that_fits(model, plan)) {
    plan.fits_with = fitting->request;
    plan.fits_with_total_bytes = fitting->total_bytes;
  } else {
    plan.notes.push_back(str("no data-parallel setup up to ", kMaxWorld, " devices fits ", plan.device.name,
                             ": the activations of ", plan.per_device_batch,
                             " samples per device or one layer's parameters are too large; lower the per-device "
                             "batch (gradient accumulation keeps the global batch) or split the layers with tensor "
                             "and pipeline parallelism"));
  }
  return plan;
}

int64_t parse_parameter_count(std::string_view text) {
  auto fail = [&](const char* why) {
    return ValueError(str("--params: must be a whole number of parameters from 1 to 1e15, such as 124e6, 7B or 70e9, ",
                          "got '", text, "' (", why, ")"));
  };
  std::string s(text);
  double scale = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': case 'K': scale = 1e3; break;
      case 'm': case 'M': scale = 1e6; break;
      case 'b': case 'B': case 'g': case 'G': scale = 1e9; break;
      case 't': case 'T': scale = 1e12; break;
      default: break;
    }
    if (scale != 1) s.pop_back();
  }
  if (s.empty()) throw fail("no number");
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end) * scale;
  if (end != s.c_str() + s.size()) throw fail("not a number");
  if (!(value >= 1)) throw fail("it must be at least 1");
  if (value > 1e15) throw fail("more than 1e15");
  const double rounded = std::round(value);
  if (std::abs(value - rounded) > 1e-6 * value) throw fail("not a whole number");
  return static_cast<int64_t>(rounded);
}

std::string format_decimal_bytes(int64_t bytes) {
  if (bytes < 1000) return str(bytes, " B");
  const char* units[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double value = static_cast<double>(bytes) / 1000;
  int unit = 0;
  while (value >= 999.5 && unit < 5) {
    value /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, value >= 99.95 ? "%.0f %s" : value >= 9.995 ? "%.1f %s" : "%.2f %s", value,
                units[unit]);
  return text;
}

}  // namespace weft::memory
