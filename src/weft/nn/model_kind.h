// ModelKind: the models weft builds by name, one vocabulary for `weft train --model`, the
// checkpoints' weft.model metadata (and trainer.json's "model"), the planner and the server.
//
//   mlp  the image classifier nn::make_mlp builds
//   cnn  the image classifier nn::make_cnn builds
//   gpt  nn::GPT, the language model
//
// A name is parsed where it enters (a flag, a file's metadata), each place with its own message
// for a name it does not know; after that the kinds compare as enums. Files keep the names.
// Invariant: find_model_kind(model_kind_name(k)) == k for every kind.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::nn {

enum class ModelKind { mlp, cnn, gpt };

const char* model_kind_name(ModelKind kind);
// The kind named `name` exactly; nullopt for any other name.
std::optional<ModelKind> find_model_kind(std::string_view name);
// The kind `--model NAME` names; ValueError listing the kinds otherwise.
ModelKind parse_model_kind(std::string_view name);
// Every kind's name, in the enum's order: {"mlp", "cnn", "gpt"}.
std::vector<std::string> model_kind_names();
// mlp and cnn: trained on images (train/image_task.h), built by make_image_classifier.
inline bool is_image_classifier(ModelKind kind) { return kind != ModelKind::gpt; }

}  // namespace weft::nn
