#include "weft/nn/model_kind.h"

#include "weft/core/error.h"

namespace weft::nn {

namespace {

constexpr ModelKind kKinds[] = {ModelKind::mlp, ModelKind::cnn, ModelKind::gpt};

}  // namespace

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::mlp: return "mlp";
    case ModelKind::cnn: return "cnn";
    case ModelKind::gpt: return "gpt";
  }
  return "?";
}

std::optional<ModelKind> find_model_kind(std::string_view name) {
  for (ModelKind kind : kKinds)
    if (name == model_kind_name(kind)) return kind;
  return std::nullopt;
}

ModelKind parse_model_kind(std::string_view name) {
  const std::optional<ModelKind> kind = find_model_kind(name);
  WEFT_CHECK(kind.has_value(), ValueError, "--model: must be one of mlp, cnn, gpt, got '", name, "'");
  return *kind;
}

std::vector<std::string> model_kind_names() {
  std::vector<std::string> names;
  for (ModelKind kind : kKinds) names.push_back(model_kind_name(kind));
  return names;
}

}  // namespace weft::nn
