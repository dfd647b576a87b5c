// The memory planner behind `weft plan`: the memory arithmetic of training (bytes per parameter,
// activations, ZeRO / FSDP sharding and a strategy chart) as a function from a training setup to
// the bytes each device needs, whether they fit a device, and what strategy to use.
//
// Bytes per parameter, before sharding (the convention of the ZeRO paper and DeepSpeed):
//
//   precision   params  grads  Adam / AdamW (K)        SGD momentum  plain SGD   Adam total
//   fp32          4       4     8 (m, v)                  4             0         16
//   fp16, bf16    2       2    12 (f32 master, m, v)      8             4         16
//   bf16-pure     2       2     4 (m, v in bf16)          2             0          8
//
// fp16 / bf16 are mixed precision: the model computes in 16 bits and the optimizer owns an f32
// master copy of every weight. ZeRO over `world` devices (Psi parameters, Psi (2 + 2 + K) / N in the
// paper): stage 1 shards the optimizer states, 2 also the gradients, 3 also the parameters, each
// divided by world. Stage 3 also holds one layer's parameters and gradients in full while computing
// it (the all-gather) - counted as gathered_bytes.
//
// The total is the predicted peak of a step on one device: the ActivationTape replayed with the
// parameters and optimizer states (one flat buffer each, as weft's optimizers hold them) resident
// and the gradients alive as weft's trainer keeps them (cleared before the forward, built up by the
// backward; all of them alive through a later micro-batch when accumulating). It is at most the sum
// of the parts. --batch is the global batch: data parallelism splits it over the replicas, and
// DDP's buckets hold a flat copy of the gradients.
//
// Tensor parallelism over tp ranks and pipeline parallelism over pp stages (a GPT) plan each
// stage's share: its parameters (ModelDescription::gpt with a GptShare) and one micro-batch's step
// on it, replayed with the micro-batches the schedule keeps in flight beside it.
//
// Invariant: every byte count in a Plan is per device.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/amp/precision.h"
#include "weft/memory/devices.h"
#include "weft/memory/model.h"
#include "weft/optim/kind.h"

namespace weft::memory {

// The trainer's names for precisions and optimizers (amp/precision.h, optim/kind.h).
using amp::Precision;
using optim::OptimizerKind;

struct BytesPerParameter {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t optimizer_element = 4;  // each optimizer buffer (master copy, m, v, momentum) has this many bytes a parameter
  int64_t total() const { return params + grads + optimizer; }
};
BytesPerParameter bytes_per_parameter(Precision precision, OptimizerKind optimizer);

// One row of the strategy chart: which parallelism a model of this size calls for.
struct ChartRow {
  const char* model_size;  // "1-10GB"
  std::string strategy;    // "Single GPU, mixed precision"
};
// The chart's "model size" is read as the weights in fp32 (parameters x 4 bytes): the size of the
// model weft trains and saves, independent of --precision so that the advice does not move when
// the precision does.
// `device_kind` ("GPU", "CPU") names what the rows count: the chart is written for GPUs, and its
// advice reads the same for the processes of a CPU run.
ChartRow strategy_chart_row(int64_t model_size_bytes, std::string_view device_kind);

// Data parallelism beyond this many devices is not a plan anyone runs: the search for a setup that
// fits stops there, and --gpus, --tp and --pp go no further.
inline constexpr int64_t kMaxWorld = int64_t{1} << 20;
struct PlanRequest {
  int64_t batch = 0;  // global; 0: the model's default per device, times world
  Precision precision = Precision::fp32;
  OptimizerKind optimizer = OptimizerKind::adam;
  int zero = 0;
  int64_t world = 1;
  bool checkpoint_activations = false;
  std::string device = "H100";
  // Model parallelism (a GPT only): world = data-parallel replicas x tp x pp, the batch split over
  // the replicas. micro_batches: --grad-accum's, each replica's batch run in that many pieces; under
  // pipeline parallelism they flow through the stages under pp_schedule ("1f1b" or "gpipe").
  int64_t tp = 1, pp = 1, micro_batches = 1;
  std::string pp_schedule = "1f1b";

  bool splits_model() const { return tp > 1 || pp > 1; }
  int64_t replicas() const { return world / (tp * pp); }  // data-parallel; tp and pp checked first
};

// One pipeline stage's device (every stage's, tp ranks alike): the states of its share of the
// model, and its activations with `in_flight` micro-batches' kept at once (GPipe: all of them;
// 1F1B: pp - stage at most).
struct StagePlan {
  int64_t stage = 0, parameters = 0, in_flight = 1;
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, bucket_bytes = 0, gathered_bytes = 0,
          rounding_bytes = 0, activations_bytes = 0, total_bytes = 0;
  std::string peak_at;
};

struct Plan {
  PlanRequest request;           // as planned (batch filled in)
  int64_t per_device_batch = 0;  // each data-parallel replica's
  // Under tensor or pipeline parallelism, each stage's device; the rows below are the largest one's.
  std::vector<StagePlan> stages;
  BytesPerParameter per_parameter;
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  int64_t gathered_bytes = 0;     // ZeRO-3's unsharded layer, 0 otherwise
  // DDP's flat buckets, or ZeRO-1's, one copy of every gradient (dist/ddp.h, dist/zero.h), resident
  // beside the gradients themselves; 0 without data parallelism, under ZeRO-2 and 3 and between the
  // replicas of a pipeline without ZeRO (they average the gradients in place).
  int64_t bucket_bytes = 0;
  // What the three states above hold beyond parameters x bytes per parameter, because each
  // parameter-sized tensor is its own allocation (fresh_block_bytes); 0 for a bare parameter count.
  int64_t rounding_bytes = 0;
  bool activations_known = false;
  int64_t activations_bytes = 0;  // the activations' own high-water mark
  int64_t total_bytes = 0;        // the predicted peak per device
  std::string peak_at;            // where in the step it happens
  DeviceSpec device;
  bool fits = false;
  int64_t model_size_bytes = 0;   // the chart's model size
  ChartRow chart;
  // The first change (in the order: bf16 mixed precision, ZeRO stages over the same devices,
  // activation checkpointing, more devices with ZeRO-3 at the same per-device batch) under which
  // the plan fits, when it does not; its total in fits_with_total_bytes.
  std::optional<PlanRequest> fits_with;
  int64_t fits_with_total_bytes = 0;
  std::vector<std::string> notes;
};

// Throws ValueError for impossible requests: a non-positive batch or world, world not dividing the
// batch, a ZeRO stage outside 0..3, an unknown device; tp or pp other than 1 for a model that is not a
// GPT, sizes it does not divide, tp x pp not dividing world, micro-batches not dividing the
// replica's batch or (1F1B) fewer than pp, ZeRO with tp or pp (weft train does not combine them).
Plan make_plan(const ModelDescription& model, PlanRequest request);

// "70e9", "7000000000", "7B", "124M", "1.5k" -> a parameter count; ValueError for anything that is
// not a positive whole number of at most 1e15.
int64_t parse_parameter_count(std::string_view text);

// "4.00 GB": decimal units with three significant digits, as the strategy chart writes sizes.
std::string format_decimal_bytes(int64_t bytes);

}  // namespace weft::memory
