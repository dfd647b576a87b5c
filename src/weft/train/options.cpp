#include "weft/train/options.h"

namespace weft::train {

namespace {

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = {{"model", model}, {"steps", or_null(steps)}, {"epochs", or_null(epochs)},
                      {"time_limit", time_limit}, {"limit_train_batches", limit_train_batches},
                      {"batch_size", or_null(batch_size)}, {"optimizer", optim::optimizer_name(optimizer)}, {"lr", or_null(lr)},
                      {"weight_decay", or_null(weight_decay)}, {"schedule", schedule}, {"warmup", or_null(warmup)},
                      {"clip_grad", or_null(clip_grad)}, {"precision", amp::precision_name(precision)}, {"grad_accum", grad_accum},
                      {"checkpoint_activations", checkpoint_activations}, {"auto_batch", auto_batch},
                      {"memory_limit", memory_limit}, {"eval_every", or_null(eval_every)}, {"seed", seed},
                      {"threads", threads}, {"profile_trace", profile_trace}};
  if (is_image_task()) {
    j["dataset"] = image.dataset;
    j["data_dir"] = image.data_dir;
  } else {
    j["tokenizer"] = text.tokenizer;
    j["data"] = text.data;
    j["val_fraction"] = text.val_fraction;
    j["eval_windows"] = text.eval_windows;
  }
  return j;
}

}  // namespace weft::train
