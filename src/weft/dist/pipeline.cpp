#include "weft/dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "weft/autograd/grad_mode.h"
#include "weft/nn/transformer.h"
#include "weft/ops/arith.h"

namespace weft::dist {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  throw ValueError(str("--pp-schedule: must be gpipe or 1f1b, got '", name, "'"));
}

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

std::vector<PipelinePass> stage_passes(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  WEFT_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1, ValueError, "pipeline: stage ", stage,
             " of ", stages, " with ", micro_batches, " micro-batches");
  WEFT_CHECK(schedule == PipelineSchedule::gpipe || micro_batches >= stages, ValueError, "--pp-schedule 1f1b: needs at "
             "least as many micro-batches (--grad-accum) as stages (--pp ", stages, "), got ", micro_batches);
  std::vector<PipelinePass> passes;
  if (schedule == PipelineSchedule::gpipe) {
    for (int64_t i = 0; i < micro_batches; ++i) passes.push_back({true, i});
    for (int64_t i = 0; i < micro_batches; ++i) passes.push_back({false, i});
    return passes;
  }
  const int64_t warmup = std::min(stages - stage - 1, micro_batches);
  for (int64_t i = 0; i < warmup; ++i) passes.push_back({true, i});
  for (int64_t i = 0; i < micro_batches - warmup; ++i) {
    passes.push_back({true, warmup + i});
    passes.push_back({false, i});
  }
  for (int64_t i = micro_batches - warmup; i < micro_batches; ++i) passes.push_back({false, i});
  return passes;
}

PipelineTimeline pipeline_timeline(PipelineSchedule schedule, int64_t stages, int64_t micro_batches) {
  std::vector<std::vector<PipelinePass>> order;
  for (int64_t s = 0; s < stages; ++s) order.push_back(stage_passes(schedule, s, stages, micro_batches));
  // done[s][pass] = the slot it ran in; a pass may run once its input was produced in an earlier slot.
  std::map<std::tuple<int64_t, bool, int64_t>, int64_t> done;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  PipelineTimeline timeline{std::vector<std::vector<std::string>>(static_cast<size_t>(stages))};
  auto finished_before = [&](int64_t s, bool forward, int64_t micro, int64_t slot) {
    auto it = done.find({s, forward, micro});
    return it != done.end() && it->second < slot;
  };
  for (int64_t slot = 0;; ++slot) {
    bool left = false;
    for (int64_t s = 0; s < stages; ++s) {
      auto& row = timeline.slots[static_cast<size_t>(s)];
      const std::vector<PipelinePass>& passes = order[static_cast<size_t>(s)];
      if (next[static_cast<size_t>(s)] == passes.size()) continue;
      left = true;
      const PipelinePass p = passes[next[static_cast<size_t>(s)]];
      const bool ready = p.forward ? s == 0 || finished_before(s - 1, true, p.micro, slot)
                                   : s == stages - 1 || finished_before(s + 1, false, p.micro, slot);
      row.resize(static_cast<size_t>(slot) + 1);
      if (!ready) continue;
      row.back() = str(p.forward ? "F" : "B", p.micro + 1);
      done[{s, p.forward, p.micro}] = slot;
      ++next[static_cast<size_t>(s)];
    }
    if (!left) break;
  }
  for (auto& row : timeline.slots) {  // up to the last busy slot of any stage
    while (!row.empty() && row.back().empty()) row.pop_back();
  }
  size_t width = 0;
  for (const auto& row : timeline.slots) width = std::max(width, row.size());
  for (auto& row : timeline.slots) row.resize(width);
  return timeline;
}

double PipelineTimeline::idle_fraction() const {
  int64_t idle = 0, all = 0;
  for (const auto& row : slots)
    for (const std::string& cell : row) {
      idle += cell.empty();
      ++all;
    }
  return all ? static_cast<double>(idle) / static_cast<double>(all) : 0;
}

std::string PipelineTimeline::draw() const {
  size_t cell = 2;
  for (const auto& row : slots)
    for (const std::string& c : row) cell = std::max(cell, c.size());
  std::string out;
  for (size_t s = 0; s < slots.size(); ++s) {
    out += str("stage ", s, ":");
    for (const std::string& c : slots[s]) {
      const std::string shown = c.empty() ? std::string(cell, '.') : c;
      out += " " + shown + std::string(cell - shown.size(), ' ');
    }
    out += "\n";
  }
  return out;
}

PipelineStepResult run_pipeline_step(ProcessGroup& group, PipelineSchedule schedule, int64_t micro_batches,
                                     const StageFunction& stage, const std::function<Tensor(int64_t micro)>& inputs) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const int64_t s = group.rank(), stages = group.size();
  const bool first = s == 0, last = s == stages - 1;
  const std::vector<PipelinePass> passes = stage_passes(schedule, s, stages, micro_batches);
  PipelineStepResult result;
  // What each micro-batch in flight keeps until its backward: the stage's input (a leaf whose
  // gradient goes back) and its output (the activation sent on, or the loss).
  std::map<int64_t, std::pair<Tensor, Tensor>> in_flight;
  Tensor received;  // the next pass's input or output gradient, already received by a combined send_recv
  auto buffer = [&] { return Tensor::empty(stage.activation, stage.dtype); };
  // A wait for a neighbour, timed as idle.
  auto communicate = [&](const std::function<void()>& op) {
    const Clock::time_point t = Clock::now();
    op();
    result.idle_seconds += std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (size_t k = 0; k < passes.size(); ++k) {
    const PipelinePass pass = passes[k];
    const bool next_is_other_kind = k + 1 < passes.size() && passes[k + 1].forward != pass.forward;
    if (pass.forward) {
      Tensor input;
      if (first) {
        input = inputs(pass.micro);
      } else {
        if (!received.defined()) {
          received = buffer();
          communicate([&] { group.recv(received, static_cast<int>(s - 1)); });
        }
        input = received.requires_grad_();
        received = Tensor();
      }
      Tensor output = stage.forward(input, pass.micro);
      if (last) result.loss_sum += output.item();
      in_flight[pass.micro] = {input, output};
      result.max_in_flight = std::max(result.max_in_flight, static_cast<int64_t>(in_flight.size()));
      if (!last) {
        WEFT_CHECK(output.shape() == stage.activation, ShapeError, "pipeline: stage ", s, " produced ",
                   shape_str(output.shape()), ", the stages pass on ", shape_str(stage.activation));
        const Tensor sent = Tensor::empty(stage.activation, stage.dtype).copy_(output.detach());
        if (next_is_other_kind) {  // Megatron's send_forward_recv_backward
          received = buffer();
          communicate([&] { group.send_recv(sent, static_cast<int>(s + 1), received, static_cast<int>(s + 1)); });
        } else {
          communicate([&] { group.send(sent, static_cast<int>(s + 1)); });
        }
      }
      continue;
    }
    auto [input, output] = in_flight.at(pass.micro);
    in_flight.erase(pass.micro);
    if (last) {
      output.backward();
    } else {
      if (!received.defined()) {
        received = buffer();
        communicate([&] { group.recv(received, static_cast<int>(s + 1)); });
      }
      output.backward(received.dtype() == output.dtype() ? received
                                                         : Tensor::empty(output.shape(), output.dtype()).copy_(received));
      received = Tensor();
    }
    output = Tensor();
    if (first) continue;
    const Tensor grad = input.grad().defined() ? input.grad().contiguous() : Tensor::zeros(stage.activation, stage.dtype);
    if (next_is_other_kind) {  // Megatron's send_backward_recv_forward
      received = buffer();
      communicate([&] { group.send_recv(grad, static_cast<int>(s - 1), received, static_cast<int>(s - 1)); });
    } else {
      communicate([&] { group.send(grad, static_cast<int>(s - 1)); });
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

namespace {

// The stage's blocks, each under its index in the whole model ("2", "3"), run in order.
class StageBlocks : public nn::Module {
 public:
  StageBlocks() : Module("Sequential") {}
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& [name, block] : named_children()) y = (*block)(y);
    return y;
  }
};

nn::GPTPartition checked_partition(const nn::GPTConfig& config, int64_t stages) {
  WEFT_CHECK(stages >= 1 && stages <= config.layers, ValueError, "--pp ", stages, ": the GPT's ", config.layers,
             " blocks cannot make ", stages, " stages (--layers must be at least --pp)");
  return {config.layers, stages};
}

}  // namespace

GPTStage::GPTStage(const nn::GPT& whole, int64_t stage_index, int64_t stage_count)
    : Module("GPTStage"),
      stage(stage_index),
      stages(stage_count),
      partition(checked_partition(whole.config, stage_count)),
      first_block(partition.first_block(stage)),
      end_block(partition.first_block(stage + 1)),
      config(whole.config) {
  const bool first = partition.holds_embeddings(stage), last = partition.holds_head(stage);
  if (first) {
    register_module("wte", wte, whole.wte);
  } else if (last) {  // the tied projection's own copy of the table, kept equal by tie_gradients
    register_module("wte", wte, whole.wte->with_copied_table());
  }
  if (first) {
    register_module("wpe", wpe, whole.wpe);
    register_module("drop", drop, whole.drop);
  }
  register_module("h", h, std::make_shared<StageBlocks>());
  for (int64_t i = first_block; i < end_block; ++i) h->register_module(str(i), (*whole.h)[static_cast<size_t>(i)]);
  if (last) register_module("ln_f", ln_f, whole.ln_f);
}

Tensor GPTStage::forward(const Tensor& x) {
  Tensor y = x;
  if (stage == 0) {
    WEFT_CHECK(x.dim() == 2 && x.size(1) <= config.context, ShapeError, "GPTStage: expected tokens [B, T <= ",
               config.context, "], got ", shape_str(x.shape()));
    Tensor token_embeddings = (*wte)(x);
    y = (*drop)(add(token_embeddings, (*wpe)(Tensor::arange(x.size(1), DType::i64))));
  }
  y = (*h)(y);
  return stage == stages - 1 ? wte->attend((*ln_f)(y)) : y;
}

void GPTStage::tie_gradients(ProcessGroup& group) {
  if (stages == 1 || (stage != 0 && stage != stages - 1)) return;
  NoGradGuard no_grad;
  const Tensor& weight = wte->weight;
  const Tensor mine = weight.grad().defined() ? weight.grad().contiguous() : Tensor::zeros(weight.shape(), weight.dtype());
  Tensor theirs = Tensor::empty(weight.shape(), weight.dtype());
  const int peer = stage == 0 ? static_cast<int>(stages - 1) : 0;
  group.send_recv(mine, peer, theirs, peer);
  // Both add the same two tensors (addition commutes): the same sum, bit for bit, on both.
  weight.set_grad(add(mine, theirs));
}

}  // namespace weft::dist
