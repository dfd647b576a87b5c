#include "weft/memory/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "weft/core/allocator.h"
#include "weft/core/flag_value.h"
#include "weft/core/error.h"

namespace weft::memory {

namespace {

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

void check_request(const ModelDescription& model, const PlanRequest& r) {
  check_flag("--gpus", r.world, {.min = 1, .max = kMaxWorld});
  check_flag("--zero", r.zero, {.min = 0, .max = 3});
  check_flag("--batch-size", r.batch, {.min = 1, .max = kMaxPlanCount});
  check_flag("--tp", r.tp, {.min = 1, .max = kMaxWorld});
  check_flag("--pp", r.pp, {.min = 1, .max = kMaxWorld});
  check_flag("--grad-accum", r.micro_batches, {.min = 1, .max = kMaxPlanCount});
  const bool split = r.splits_model();
  WEFT_CHECK(!split || model.gpt_config().has_value(), ValueError,
             "--tp, --pp: tensor and pipeline parallelism split a GPT; describe one (--model gpt, or --layers "
             "--dim --heads --vocab --context)");
  WEFT_CHECK(!split || r.zero <= 1, ValueError, "--zero ", r.zero, ": not with --tp or --pp (weft train shards a "
             "split model's optimizer states over its replicas, --zero 1, and its gradients and parameters not)");
  WEFT_CHECK(r.world % (r.tp * r.pp) == 0, ValueError, "--gpus: must be a multiple of --tp x --pp (", r.tp * r.pp,
             "), the rest data parallel, got '", r.world, "'");
  const int64_t replicas = r.replicas();
  if (r.batch % replicas != 0)
    throw ValueError(split ? str("--gpus: its ", replicas, " data-parallel replicas must divide --batch-size (", r.batch,
                                 ") so that each gets batch / replicas samples")
                           : str("--gpus: must divide --batch-size (", r.batch,
                                 ") so that data parallelism gives each device batch / world samples, got '", r.world,
                                 "'"));
  WEFT_CHECK((r.batch / replicas) % r.micro_batches == 0, ValueError, "--grad-accum: must divide each replica's batch (",
             r.batch / replicas, "), got '", r.micro_batches, "'");
  WEFT_CHECK(r.pp_schedule == "1f1b" || r.pp_schedule == "gpipe", ValueError,
             "--pp-schedule: must be 1f1b or gpipe, got '", r.pp_schedule, "'");
  WEFT_CHECK(r.pp == 1 || r.pp_schedule != "1f1b" || r.micro_batches >= r.pp, ValueError, "--grad-accum: 1F1B over ",
             r.pp, " stages needs at least ", r.pp, " micro-batches, got '", r.micro_batches, "'");
}

// One stage's device: the states of its share of the model and the step replayed beside them.
StagePlan plan_stage(const ModelDescription& share, const PlanRequest& r, const BytesPerParameter& per,
                     int64_t stage, int64_t micro_rows) {
  StagePlan out;
  out.stage = stage;
  out.parameters = share.num_parameters();
  const int64_t psi = share.num_parameters();
  // A state sharded by ZeRO is one flat buffer per device; otherwise each parameter tensor has its
  // own, as the allocator hands it out (when the tensors are known).
  auto state_bytes = [&](int64_t element, int64_t buffers, int zero_stage) {
    int64_t total = 0;
    WEFT_CHECK(!__builtin_mul_overflow(psi, element * buffers, &total), ValueError, "plan: ", psi,
               " parameters are more than this planner can count in bytes");
    if (r.zero >= zero_stage) return divide_up(total, r.replicas());
    if (share.parameter_tensors().empty() || buffers == 0) return total;
    int64_t blocks = 0;
    for (int64_t numel : share.parameter_tensors()) blocks += buffers * fresh_block_bytes(numel * element);
    out.rounding_bytes += blocks - total;
    return blocks;
  };
  // The optimizer's state is flat (optim/optimizer.h): one allocation per buffer for every parameter.
  const int64_t optimizer_buffers = per.optimizer / per.optimizer_element;
  out.optimizer_bytes = r.zero >= 1 ? state_bytes(per.optimizer_element, optimizer_buffers, 1)
                                    : optimizer_buffers * fresh_block_bytes(psi * per.optimizer_element);
  out.grads_bytes = state_bytes(per.grads, 1, 2);
  out.params_bytes = state_bytes(per.params, 1, 3);
  // DDP's buckets and ZeRO-1 and 2's flat layout of `element`-byte values, one allocation each, cut
  // as dist/gradient_buckets.h's reverse_order_buckets cuts them: the parameters last to first,
  // the first bucket at most 1 MiB (so that communication starts early), the others at most 25 MiB
  // (weft train's --bucket-mb). A bare parameter count: one bucket of 1 MiB and one of the rest.
  auto flat_buckets = [&](int64_t element) {
    constexpr int64_t kFirst = int64_t{1} << 20, kOthers = int64_t{25} << 20;
    const std::vector<int64_t>& tensors = share.parameter_tensors();
    if (tensors.empty()) {
      const int64_t total = psi * element, first = std::min(total, kFirst);
      return fresh_block_bytes(first) + (total > first ? fresh_block_bytes(total - first) : 0);
    }
    int64_t bytes = 0, filled = 0, buckets = 0;
    for (auto numel = tensors.rbegin(); numel != tensors.rend(); ++numel) {
      if (buckets == 0 || filled + *numel * element > (buckets == 1 ? kFirst : kOthers)) {
        if (buckets > 0) bytes += fresh_block_bytes(filled);
        ++buckets;
        filled = 0;
      }
      filled += *numel * element;
    }
    return bytes + fresh_block_bytes(filled);
  };
  const bool zero_layout = (r.zero == 1 || r.zero == 2) && r.world > 1;
  if (zero_layout && !share.parameter_tensors().empty()) {  // the parameters are views of the buckets
    out.rounding_bytes -= out.params_bytes - psi * per.params;
    out.params_bytes = flat_buckets(per.params);
    out.rounding_bytes += out.params_bytes - psi * per.params;
  }
  // DDP copies each gradient into its bucket when ready; ZeRO-1 too, into buckets it keeps from the
  // first step on (dist/zero.h).
  if ((r.replicas() > 1 && r.zero == 0 && r.pp == 1) || (r.zero == 1 && r.world > 1))
    out.bucket_bytes = flat_buckets(per.grads);
  if (r.zero == 3 && r.world > 1) {
    const int64_t unit = share.largest_unit_parameters() * (per.params + per.grads);
    out.gathered_bytes = unit - divide_up(unit, r.replicas());
  }
  // GPipe runs every forward before the first backward; 1F1B's stage s holds at most pp - s.
  out.in_flight = r.pp == 1 ? 1 : r.pp_schedule == "gpipe" ? r.micro_batches : std::min(r.pp - stage, r.micro_batches);
  const int64_t resident = out.params_bytes + out.optimizer_bytes + out.bucket_bytes + out.gathered_bytes;
  if (share.knows_activations()) {
    ActivationTape tape = share.step_tape(micro_rows, activation_format(r.precision), r.checkpoint_activations);
    const int64_t earlier = (out.in_flight - 1) * tape.bytes_after_forward();
    out.activations_bytes = tape.replay().bytes + earlier;
    // Gradients: weft's trainer clears them before a step's first forward (train/step.cpp, and
    // the pipeline's step), and the backward makes them one by one. A later micro-batch's forward
    // and backward run with all of them alive, accumulating: with gradient accumulation, and in
    // 1F1B's steady state (a forward after a backward). GPipe's peak is its first backward, with
    // every micro-batch kept.
    const bool accumulating =
        r.pp == 1 ? r.micro_batches > 1 : r.pp_schedule == "1f1b" && r.micro_batches > out.in_flight;
    ActivationTape::Peak peak =
        tape.replay({.resident_bytes = resident + earlier + (accumulating ? out.grads_bytes : 0),
                     .grad_bytes_per_param = accumulating ? 0.0 : static_cast<double>(out.grads_bytes) / psi,
                     .grads_alive_in_forward = false});
    out.total_bytes = peak.bytes;
    out.peak_at = peak.where;
  } else {
    out.total_bytes = resident + out.grads_bytes;
    out.peak_at = "the optimizer step (activations not included)";
  }
  return out;
}

// The plan without the search for a configuration that fits.
Plan plan_as_requested(const ModelDescription& model, const PlanRequest& r) {
  check_request(model, r);
  Plan plan;
  plan.request = r;
  plan.per_device_batch = r.batch / r.replicas();
  plan.per_parameter = bytes_per_parameter(r.precision, r.optimizer);
  plan.activations_known = model.knows_activations();
  const int64_t micro_rows = plan.per_device_batch / r.micro_batches;
  std::vector<StagePlan> stages;
  for (int64_t stage = 0; stage < r.pp; ++stage)
    stages.push_back(plan_stage(r.splits_model() ? ModelDescription::gpt(*model.gpt_config(), {r.tp, r.pp, stage}) : model,
                                r, plan.per_parameter, stage, micro_rows));
  // The rows are the largest device's.
  const StagePlan& largest = *std::max_element(
      stages.begin(), stages.end(), [](const StagePlan& a, const StagePlan& b) { return a.total_bytes < b.total_bytes; });
  plan.params_bytes = largest.params_bytes;
  plan.grads_bytes = largest.grads_bytes;
  plan.optimizer_bytes = largest.optimizer_bytes;
  plan.bucket_bytes = largest.bucket_bytes;
  plan.gathered_bytes = largest.gathered_bytes;
  plan.rounding_bytes = largest.rounding_bytes;
  plan.activations_bytes = largest.activations_bytes;
  plan.total_bytes = largest.total_bytes;
  plan.peak_at = r.pp > 1 ? str(largest.peak_at, " on stage ", largest.stage) : largest.peak_at;
  if (r.splits_model()) plan.stages = std::move(stages);
  plan.device = find_device(r.device);
  plan.fits = plan.total_bytes <= plan.device.memory_bytes;
  plan.model_size_bytes = model.num_parameters() * 4;
  plan.chart = strategy_chart_row(plan.model_size_bytes, plan.device.name == "cpu" ? "CPU" : "GPU");
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
  const bool split = r.splits_model();  // weft train combines ZeRO-1 only with tp or pp
  if (r.replicas() > 1)
    for (int stage = r.zero + 1; stage <= (split ? 1 : 3); ++stage) {
      r.zero = stage;
      if (auto p = fits(r)) return p;
    }
  if (!r.checkpoint_activations && model.knows_activations()) {
    r.checkpoint_activations = true;
    if (auto p = fits(r)) return p;
  }
  if (split) return std::nullopt;
  r.zero = 3;
  for (int64_t world = r.world * 2; world <= kMaxWorld; world *= 2) {
    if (plan.per_device_batch > kMaxPlanCount / world) break;  // past what a plan may be asked for
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

ChartRow strategy_chart_row(int64_t model_size_bytes, std::string_view device_kind) {
  const std::string one = str("Single ", device_kind), many = str(device_kind, "s");
  const ChartRow rows[] = {
      {"< 1GB", one + ", FP32"},
      {"1-10GB", one + ", mixed precision"},
      {"10-40GB", str("DDP (2-4 ", many, "), mixed precision")},
      {"40-100GB", str("FSDP (4-8 ", many, "), BF16")},
      {"100GB-1TB", str("FSDP (8+ ", many, "), BF16, gradient checkpointing")},
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
    check_flag("--gpus", request.world, {.min = 1, .max = kMaxWorld});
    check_flag("--grad-accum", request.micro_batches, {.min = 1, .max = kMaxPlanCount});
    const int64_t split = std::max<int64_t>(1, request.tp) * std::max<int64_t>(1, request.pp);
    const int64_t replicas = std::max<int64_t>(1, request.world / split);
    request.batch = model.default_batch() * replicas * request.micro_batches;
    WEFT_CHECK(request.batch <= kMaxPlanCount, ValueError, "plan: the default batch, ", model.default_batch(),
               " per device x ", replicas, " data-parallel replicas x ", request.micro_batches,
               " micro-batches (--grad-accum), is more than ", kMaxPlanCount, "; give --batch-size");
  }
  Plan plan = plan_as_requested(model, request);
  const PlanRequest& r = plan.request;
  if (r.zero > 0 && r.world == 1)
    plan.notes.push_back("ZeRO shards over --gpus devices; on one device it divides nothing");
  if (!plan.activations_known)
    plan.notes.push_back("activations are not included: a parameter count says nothing about them; describe the "
                         "architecture (--model, or --layers --dim --heads --vocab --context) to count them");
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
  } else if (r.splits_model()) {
    plan.notes.push_back("neither bf16 nor activation checkpointing makes it fit: more tensor-parallel ranks or "
                         "pipeline stages, or fewer samples per micro-batch (--grad-accum)");
  } else {
    // The search doubles the devices while the global batch stays within what a plan may ask for.
    int64_t searched = r.world;
    while (searched * 2 <= kMaxWorld && plan.per_device_batch <= kMaxPlanCount / (searched * 2)) searched *= 2;
    plan.notes.push_back(str("no data-parallel setup up to ", searched, " devices fits ", plan.device.name,
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
