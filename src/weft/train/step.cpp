#include "weft/train/step.h"

#include <filesystem>
#include <fstream>
#include <string_view>

#include "weft/autograd/autocast_mode.h"
#include "weft/core/allocator.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"
#include "weft/kernels/cpu/onednn.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"

namespace weft::train {

void check_precision(amp::Precision precision, std::ostream& log) {
  WEFT_CHECK(precision != amp::Precision::bf16_pure, ValueError,
             "--precision bf16-pure is priced by weft plan but not trained: weft train keeps f32 master weights; "
             "use --precision bf16 (int8 is for inference: weft quantize)");
  const bool bf16 = precision == amp::Precision::bf16;
  if (bf16 && cpu::onednn::bf16_support() == cpu::onednn::Bf16Support::emulated)
    log << "note: this CPU has no bf16 instructions; oneDNN emulates bf16 with AVX-512, slower than fp32\n";
  if (bf16 && cpu::onednn::bf16_support() == cpu::onednn::Bf16Support::none)
    log << "note: this CPU has no AVX-512, and oneDNN no bf16 kernels without it: bf16 GEMMs and convolutions "
           "widen to f32 and round back, slower than fp32\n";
}

int64_t count_correct(const Tensor& logits, const Tensor& targets) {
  Tensor predicted = argmax(logits.detach(), 1);
  const int64_t* p = predicted.data<int64_t>();
  const int64_t* t = targets.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) correct += p[i] == t[i];
  return correct;
}

StepTally accumulate_gradients(nn::Module& model, const LossFn& loss_fn, const data::Batch& batch, int64_t micro_batch,
                               std::optional<DType> low_precision, const amp::GradScaler* scaler,
                               bool tally_correct, optim::BackwardGradNorm* grad_norm,
                               dist::GradientSync* sync) {
  StepTally tally;
  const int64_t samples = batch.targets.size(0);
  const double predictions = static_cast<double>(batch.targets.numel());
  bool synchronised = false;  // the last micro-batch's backward has been through `sync`
  try {
  for (int64_t begin = 0; begin < samples; begin += micro_batch) {
    const int64_t length = std::min(micro_batch, samples - begin);
    Tensor targets = batch.targets.narrow(0, begin, length).reshape({-1});
    Tensor logits, loss_sum, loss;
    {
      monitor::PhaseScope phase("forward");
      {
        AutocastGuard autocast(low_precision);
        Tensor output = model(batch.inputs.narrow(0, begin, length));
        logits = output.view({targets.numel(), output.size(-1)});
        loss_sum = loss_fn(logits, targets);
      }
      loss = mul(loss_sum, 1.0 / predictions);
    }
    {
      monitor::PhaseScope phase("backward");
      const bool last = begin + length == samples;
      if (grad_norm && last) grad_norm->arm();
      if (sync) sync->prepare_backward(last);
      (scaler ? scaler->scale(loss) : loss).backward();
      if (sync) sync->finish_backward();
      synchronised = last;
    }
    tally.loss_sum += loss_sum.item();
    if (tally_correct) tally.correct += count_correct(logits, targets);
  }
  } catch (const OutOfMemoryError&) {
    // The other ranks wait in this step's collectives: finish them (with zeros) before giving up.
    if (sync && !synchronised) sync->abandon_pass();
    throw;
  }
  return tally;
}

StepTally accumulate_step(nn::Module& model, const LossFn& loss, optim::Optimizer& optimizer, const data::Batch& batch,
                          int64_t& micro_batch, bool auto_batch, std::optional<DType> low_precision,
                          const amp::GradScaler* scaler, int64_t step, std::ostream& log, bool tally_correct,
                          optim::BackwardGradNorm* grad_norm, dist::GradientSync* sync) {
  for (;;) {
    optimizer.zero_grad();
    std::optional<OutOfMemoryError> out_of_memory;
    StepTally tally;
    try {
      // The parameters stay as the last optimizer step left them until the next: their copies
      // are current.
      AutocastCopies copies(optimizer.params(), optimizer.low_precision_copies());
      tally = accumulate_gradients(model, loss, batch, micro_batch, low_precision, scaler, tally_correct, grad_norm, sync);
    } catch (const OutOfMemoryError& e) {
      if (!auto_batch) throw;
      out_of_memory = e;
    }
    // Data parallel, the ranks redo the step together when any of them ran out of memory (the
    // one that did has finished its collectives), so that they stay in step.
    const bool redo = auto_batch && sync ? sync->on_any_rank(out_of_memory.has_value()) : out_of_memory.has_value();
    if (!redo) return tally;
    if (micro_batch == 1) {
      if (out_of_memory) throw *out_of_memory;
      throw OutOfMemoryError(str("auto-batch: another rank ran out of memory at a micro-batch of 1 in step ", step + 1),
                             0);
    }
    // Nothing was updated yet: the step is redone from scratch in smaller pieces, and the
    // batch, so the update, stays the same.
    const int64_t samples = batch.targets.size(0);
    micro_batch = (micro_batch + 1) / 2;
    log << "auto-batch: step " << step + 1 << " ran out of memory "
        << (out_of_memory ? str("(", out_of_memory->what(), ")") : std::string("on another rank")) << "; redoing it as "
        << (samples + micro_batch - 1) / micro_batch << " micro-batches of " << micro_batch << " (batch " << samples
        << " unchanged)\n";
  }
}

bool apply_update(optim::Optimizer& optimizer, amp::GradScaler* scaler, int64_t step, std::ostream& log,
                  double grad_factor) {
  if (!scaler) {
    optimizer.step(grad_factor);
    return true;
  }
  const double scale = scaler->current_scale();
  const bool stepped = scaler->step(optimizer, grad_factor);
  const bool stuck_before = scaler->stuck_at_minimum();
  scaler->update();
  if (!stepped)
    log << "fp16: step " << step << " skipped, inf/NaN gradients at loss scale " << scale << "; scale now "
        << scaler->current_scale() << " (" << scaler->skipped_steps() << " skipped so far)\n";
  if (scaler->stuck_at_minimum() && !stuck_before)
    log << "fp16: the loss scale is stuck at its minimum and steps still overflow: this model's values "
           "exceed f16's range (65504); train with --precision bf16, which has f32's range\n";
  return stepped;
}

namespace {

// The complete lines of a metrics.jsonl up to and including `last_step`'s.
std::string metrics_through(const std::string& path, int64_t last_step) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return "";
  const std::string text = io::read_input(path, io::usable_memory_bytes());
  std::string kept;
  // A last line without its newline was torn by a kill, and goes.
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string_view line(text.data() + start, end - start);
    try {
      const nlohmann::json record = io::parse_json(line, path);
      if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<int64_t>() <= last_step)
        kept.append(line) += '\n';
    } catch (const FormatError&) {
      // Not a record weft wrote: not kept.
    }
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, int64_t kept_through) : events_(dir) {
  std::string path = (std::filesystem::path(dir) / "metrics.jsonl").string();
  const std::string kept = kept_through > 0 ? metrics_through(path, kept_through) : "";
  io::write_file_atomic(path, [&](std::FILE* file) { std::fwrite(kept.data(), 1, kept.size(), file); });
  events_.start_session(kept_through + 1);
  jsonl_.open(path, std::ios::app);
  if (!jsonl_) throw IOError(str("cannot write ", path));
}

void MetricsLog::write(int64_t step, const nlohmann::json& scalars) {
  nlohmann::json line = {{"step", step}};
  for (const auto& [tag, value] : scalars.items()) {
    events_.add_scalar(tag, value.get<double>(), step);
    line[tag] = value;
  }
  // Visible at once to a board or TensorBoard watching the run, rather than a buffer at a time.
  events_.flush();
  jsonl_ << line.dump() << '\n' << std::flush;
}

}  // namespace weft::train
