// Pipeline parallelism: the model cut by layers into P stages, one per rank of a group, and each
// step's micro-batches flowing through them: activations sent forward to the next stage, their
// gradients sent back. Two schedules:
//
//   gpipe  (GPipe, Huang et al. 2019): every micro-batch's forward, then every backward. A stage
//          keeps all m micro-batches' activations until their backward.
//   1f1b   (PipeDream-Flush, as Megatron-LM runs it): stage s does P - s - 1 warm-up forwards,
//          then alternates one forward and one backward, then drains the backwards. A stage keeps
//          at most P - s micro-batches' activations.
//
// Both leave the same gradients (the micro-batches' sum); in time slots of one forward or one
// backward each, both idle (P - 1) / (m + P - 1) of a stage's time: the bubble.
//
//   stage 0: F1 F2 F3 F4 .. .. .. B1 B2 B3 B4          (gpipe, P = 2, m = 4)
//   stage 1: .. F1 F2 F3 F4 B1 B2 B3 B4 ..
//
// The communication is at the call site of each schedule step: recv of the input from stage s - 1,
// send of the output to s + 1, and their gradients the other way; where a stage sends one way and
// its neighbour the other at the same time (1F1B's steady state), the pair is one send_recv, so
// that no two blocking sends wait on each other.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/dist/process_group.h"
#include "weft/nn/gpt.h"

namespace weft::dist {

enum class PipelineSchedule { gpipe, one_f_one_b };
PipelineSchedule parse_pipeline_schedule(const std::string& name);  // "gpipe" | "1f1b"; ValueError otherwise
const char* pipeline_schedule_name(PipelineSchedule schedule);

// One pass of one micro-batch (0-based) on a stage.
struct PipelinePass {
  bool forward;
  int64_t micro;
  bool operator==(const PipelinePass&) const = default;
};
// The passes stage `stage` of `stages` runs in one step of `micro_batches`, in order. m < P with
// 1F1B → ValueError (its steady state needs a micro-batch per stage).
std::vector<PipelinePass> stage_passes(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches);

// The step laid out in time slots, a forward or a backward one slot each, each pass as early as its
// inputs allow (a forward after the previous stage's, a backward after the next stage's) and in its
// stage's order. slots[s][t]: "F3", "B1", or "" idle.
struct PipelineTimeline {
  std::vector<std::vector<std::string>> slots;
  double idle_fraction() const;  // idle slots over all, up to the last busy one
  std::string draw() const;      // rows = stages, columns = time slots, idle as ".."
};
PipelineTimeline pipeline_timeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches);

// One stage's share of a model. `forward(input, micro)` runs the stage's layers: the first stage's
// input is the micro-batch itself (not differentiated), a later stage's the activation received
// from the one before; the last stage's output is the micro-batch's loss, a scalar, whose backward
// starts the step's. `activation` is the shape and dtype every stage passes on (an output in
// another dtype, under autocast, is converted for the wire, and its gradient back).
struct StageFunction {
  std::function<Tensor(const Tensor& input, int64_t micro)> forward;
  Shape activation;
  DType dtype = DType::f32;
};

struct PipelineStepResult {
  double loss_sum = 0;       // the last stage's micro-batch losses summed (0 on the others)
  int64_t max_in_flight = 0;  // the most micro-batches whose activations this stage held at once
  double seconds = 0, idle_seconds = 0;  // this stage's step, and its time waiting for a neighbour
};

// Runs one step's forwards and backwards on this rank's stage (rank r of `group` is stage r),
// leaving the gradients accumulated in the stage's parameters. `inputs(micro)` gives the first
// stage its micro-batch; the other stages do not call it.
PipelineStepResult run_pipeline_step(ProcessGroup& group, PipelineSchedule schedule, int64_t micro_batches,
                                     const StageFunction& stage, const std::function<Tensor(int64_t micro)>& inputs);

// The GPT's stage for rank `stage` of `stages`, cut as nn::GPTPartition says: its blocks, the
// embeddings with the first stage, the final norm and the tied output projection with the last.
// Its parameters keep the whole model's names ("h.2.attn.c_attn.weight"), so a checkpoint's
// tensors map to their stage. With P > 1 the first and the last stage both hold "wte.weight" (the
// lookup and the projection); tie_gradients sums its gradient between them after each step's
// backward, as Megatron-LM does, so both take the same update. Fewer blocks than stages →
// ValueError naming --pp. `whole` may be tensor parallel (parallelize_gpt): the stage
// then holds the rank's slices, and the last stage's logits are its share of the vocabulary.
class GPTStage : public nn::Module {
 public:
  GPTStage(const nn::GPT& whole, int64_t stage, int64_t stages);
  // First stage: tokens i64 [B, T] -> [B, T, dim]; middle: [B, T, dim] -> [B, T, dim]; last:
  // -> logits [B, T, vocab] (the loss is the caller's). One stage: tokens -> logits.
  Tensor forward(const Tensor& x) override;
  // Sums wte.weight's gradient between the first and the last stage (collective over `group`,
  // every stage calls it; a no-op for one stage).
  void tie_gradients(ProcessGroup& group);

  const int64_t stage, stages;
  const nn::GPTPartition partition;
  const int64_t first_block, end_block;
  const nn::GPTConfig config;
  std::shared_ptr<nn::Embedding> wte;  // the first and the last stage
  std::shared_ptr<nn::Module> wpe, drop, ln_f;  // wpe, drop: the first stage; ln_f: the last
  std::shared_ptr<nn::Module> h;                // this stage's blocks, named by their index in the whole
};

}  // namespace weft::dist
