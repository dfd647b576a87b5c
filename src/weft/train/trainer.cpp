#include "weft/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "weft/amp/grad_scaler.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/data/dataloader.h"
#include "weft/data/sampler.h"
#include "weft/infer/metadata.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/system.h"
#include "weft/nn/models.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/optim/schedule.h"
#include "weft/optim/sgd.h"
#include "weft/train/checkpoint.h"

namespace weft::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::unique_ptr<optim::Optimizer> make_optimizer(const ClassifierOptions& o, std::vector<Tensor> params) {
  if (o.optimizer == "adamw") {
    optim::AdamWOptions adamw;
    adamw.lr = o.lr > 0 ? o.lr : 4e-3;
    return std::make_unique<optim::AdamW>(std::move(params), adamw);
  }
  if (o.optimizer == "sgd") return std::make_unique<optim::SGD>(std::move(params), o.lr > 0 ? o.lr : 0.1, optim::SGDOptions{.momentum = 0.9});
  throw ValueError(str("unknown optimizer '", o.optimizer, "': expected adamw or sgd"));
}

std::unique_ptr<optim::LRSchedule> make_schedule(const ClassifierOptions& o, double base_lr, int64_t steps_per_epoch) {
  if (o.schedule == "constant") return std::make_unique<optim::ConstantLR>(base_lr);
  if (o.schedule == "step") return std::make_unique<optim::StepLR>(base_lr, steps_per_epoch, 0.5);
  if (o.schedule == "cosine") return std::make_unique<optim::CosineWarmupLR>(base_lr, 0, o.epochs * steps_per_epoch);
  throw ValueError(str("unknown schedule '", o.schedule, "': expected constant, step or cosine"));
}

void check_options(const ClassifierOptions& o, std::ostream& log) {
  WEFT_CHECK(o.epochs > 0, ValueError, "--epochs must be positive, got ", o.epochs);
  WEFT_CHECK(o.batch_size > 0, ValueError, "--batch-size must be positive, got ", o.batch_size);
  WEFT_CHECK(o.lr >= 0, ValueError, "--lr must not be negative, got ", o.lr);
  WEFT_CHECK(o.threads >= 0, ValueError, "--threads must not be negative, got ", o.threads);
  WEFT_CHECK(o.limit_train_batches >= 0, ValueError, "--limit-train-batches must not be negative");
  WEFT_CHECK(o.log_every > 0, ValueError, "--log-every must be positive, got ", o.log_every);
  WEFT_CHECK(o.grad_accum > 0 && o.batch_size % o.grad_accum == 0, ValueError, "--grad-accum ", o.grad_accum,
             " must be a positive divisor of --batch-size ", o.batch_size, ", so that every micro-batch has ",
             "batch-size / grad-accum samples");
  WEFT_CHECK(o.memory_limit >= 0, ValueError, "--memory-limit must not be negative");
  check_precision(o.precision, log);
}

}  // namespace

data::ImageDataset load_image_dataset(const std::string& dataset, const std::string& dir, bool train) {
  return data::load_mnist_idx(dir, train, infer::image_dataset_info(dataset).normalization);
}

nlohmann::json ClassifierOptions::to_json() const {
  return {{"model", model}, {"epochs", epochs}, {"batch_size", batch_size}, {"optimizer", optimizer},
          {"lr", lr}, {"schedule", schedule}, {"seed", seed}, {"threads", threads}, {"dataset", dataset}, {"data_dir", data_dir},
          {"limit_train_batches", limit_train_batches}, {"precision", precision}, {"grad_accum", grad_accum},
          {"checkpoint_activations", checkpoint_activations}, {"auto_batch", auto_batch}, {"memory_limit", memory_limit}};
}

EvalResult evaluate_classifier(nn::Module& model, const data::Dataset& data, int64_t batch_size) {
  NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < data.size(); begin += batch_size) {
    indices.clear();
    for (int64_t i = begin; i < std::min(begin + batch_size, data.size()); ++i) indices.push_back(i);
    data::Batch batch = data.get_batch(indices);
    Tensor logits = model(batch.inputs);
    loss_sum += cross_entropy(logits, batch.targets, Reduction::sum).item();
    correct += count_correct(logits, batch.targets);
  }
  model.train(was_training);
  result.samples = data.size();
  result.accuracy = result.samples ? double(correct) / result.samples : 0;
  result.loss = result.samples ? loss_sum / result.samples : 0;
  return result;
}

TrainResult train_classifier(const ClassifierOptions& o, std::ostream& log, bool interactive) {
  Clock::time_point start = Clock::now();
  check_options(o, log);
  if (o.threads > 0) set_num_threads(o.threads);
  if (o.memory_limit > 0) CachingAllocator::cpu().set_memory_limit(o.memory_limit);
  manual_seed(o.seed);
  auto model = nn::make_image_classifier(o.model);
  if (o.checkpoint_activations)
    model->set_checkpoint_segments(std::llround(std::sqrt(static_cast<double>(model->size()))));
  auto optimizer = make_optimizer(o, model->parameters());
  const std::optional<DType> low_precision = autocast_type(o.precision);
  std::optional<amp::GradScaler> scaler;
  if (o.precision == "fp16") scaler.emplace();

  auto train_data = std::make_shared<data::ImageDataset>(load_image_dataset(o.dataset, o.data_dir, true));
  data::ImageDataset test_data = load_image_dataset(o.dataset, o.data_dir, false);
  auto sampler = std::make_shared<data::RandomSampler>(train_data->size(), o.seed);
  data::DataLoader loader(train_data, sampler, o.batch_size, /*drop_last=*/false, o.prefetch);
  int64_t steps_per_epoch = loader.num_batches();
  if (o.limit_train_batches > 0) steps_per_epoch = std::min(steps_per_epoch, o.limit_train_batches);
  auto schedule = make_schedule(o, optimizer->lr(), steps_per_epoch);

  TrainerState state;
  if (!o.resume_dir.empty()) {
    state = load_checkpoint(o.resume_dir, *model, o.model, *optimizer);
    default_generator().set_state(state.rng);
    if (scaler && state.grad_scaler) scaler->load_state(*state.grad_scaler);
    log << "resumed from " << o.resume_dir << " at epoch " << state.epoch << ", step " << state.step << "\n";
    int64_t planned_epochs = state.options.value("epochs", o.epochs);
    if (o.schedule == "cosine" && planned_epochs != o.epochs)
      log << "note: the run was planned for " << planned_epochs << " epochs and now runs " << o.epochs
          << "; the cosine schedule is re-planned over " << o.epochs << " epochs from here\n";
  }
  std::optional<MetricsLog> metrics;
  if (!o.out_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(o.out_dir, error);
    if (error) throw IOError(str("cannot create --out directory ", o.out_dir, ": ", error.message()));
    metrics.emplace(o.out_dir, /*append=*/o.resume_dir == o.out_dir);
  }

  TrainResult result;
  result.params = model->num_parameters();
  int64_t micro_batch = o.batch_size / o.grad_accum;
  // Evaluation needs no gradients, so it runs in larger batches than training; --auto-batch
  // halves these too when they do not fit.
  int64_t eval_batch = 1000;
  auto evaluate = [&] {
    for (;;) {
      try {
        return evaluate_classifier(*model, test_data, eval_batch);
      } catch (const OutOfMemoryError& e) {
        if (!o.auto_batch || eval_batch == 1) throw;
        eval_batch = (eval_batch + 1) / 2;
        log << "auto-batch: evaluation ran out of memory (" << e.what() << "); evaluating in batches of " << eval_batch
            << "\n";
      }
    }
  };
  CachingAllocator::cpu().reset_peak_stats();
  double train_seconds = 0;
  int64_t train_samples = 0;
  model->train();
  for (int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    monitor::ProgressBar bar(log, str("epoch ", epoch + 1, "/", o.epochs), steps_per_epoch, o.batch_size, interactive,
                             o.log_every);
    Clock::time_point epoch_start = Clock::now();
    loader.start_epoch(epoch);
    double window_loss = 0, epoch_loss = 0;
    int64_t window_correct = 0, window_samples = 0, window_steps = 0, epoch_samples = 0, epoch_correct = 0;
    Clock::time_point window_start = Clock::now();
    std::string shown;  // the epoch's running loss and accuracy, on the bar from the first step
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      std::optional<data::Batch> batch = loader.next();
      if (!batch) break;
      optim::set_scheduled_lr(*optimizer, *schedule, state.step);
      StepTally tally = accumulate_step(*model, *optimizer, *batch, micro_batch, o.auto_batch, low_precision,
                                        scaler ? &*scaler : nullptr, state.step, log);
      ++state.step;
      apply_update(*optimizer, scaler ? &*scaler : nullptr, state.step, log);

      int64_t n = batch->targets.numel();
      double batch_loss = tally.loss_sum;
      int64_t batch_correct = tally.correct;
      window_loss += batch_loss;
      window_correct += batch_correct;
      window_samples += n;
      ++window_steps;
      epoch_loss += batch_loss;
      epoch_correct += batch_correct;
      epoch_samples += n;
      shown = str("loss ", std::to_string(epoch_loss / epoch_samples).substr(0, 6), " acc ",
                  std::to_string(100.0 * epoch_correct / epoch_samples).substr(0, 5), "%");
      if (window_steps == o.log_every || i + 1 == steps_per_epoch) {
        double seconds = seconds_since(window_start);
        MemoryStats memory = CachingAllocator::cpu().stats();
        nlohmann::json scalars = {{"train/loss", window_loss / window_samples},
                                  {"train/accuracy", double(window_correct) / window_samples},
                                  {"train/lr", optimizer->lr()},
                                  {"train/samples_per_s", window_samples / seconds},
                                  {"memory/allocated_bytes", memory.allocated_bytes},
                                  {"memory/reserved_bytes", memory.reserved_bytes}};
        if (scaler) {
          scalars["amp/loss_scale"] = scaler->current_scale();
          scalars["amp/skipped_steps"] = scaler->skipped_steps();
        }
        if (metrics) metrics->write(state.step, scalars);
        window_loss = 0;
        window_correct = window_samples = window_steps = 0;
        window_start = Clock::now();
      }
      bar.update(i + 1, shown);
    }
    train_seconds += seconds_since(epoch_start);
    train_samples += epoch_samples;
    bar.finish(shown);
    state.epoch = epoch + 1;
    if (!o.out_dir.empty()) {
      EvalResult test = evaluate();
      metrics->write(state.step, {{"test/accuracy", test.accuracy}, {"test/loss", test.loss}});
      metrics->flush();
      state.rng = default_generator().state();
      state.options = o.to_json();
      if (scaler) state.grad_scaler = scaler->state();
      save_checkpoint(o.out_dir, *model, o.model, *optimizer, state, infer::classifier_metadata(o.dataset));
      log << "epoch " << state.epoch << ": test accuracy " << 100 * test.accuracy << "%, checkpoint in " << o.out_dir
          << "\n";
    }
  }

  EvalResult test = evaluate();
  result.steps = state.step;
  result.micro_batch = micro_batch;
  if (scaler) {
    result.skipped_steps = scaler->skipped_steps();
    result.loss_scale = scaler->current_scale();
  }
  result.test_accuracy = test.accuracy;
  result.test_loss = test.loss;
  result.train_samples_per_s = train_seconds > 0 ? train_samples / train_seconds : 0;
  result.peak_allocated_bytes = CachingAllocator::cpu().stats().peak_allocated_bytes;
  result.peak_rss_bytes = monitor::peak_rss_bytes();
  result.wall_s = seconds_since(start);
  return result;
}

}  // namespace weft::train
