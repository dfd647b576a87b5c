#include "weft/optim/kind.h"

#include "weft/core/error.h"

namespace weft::optim {

OptimizerKind parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "momentum") return OptimizerKind::momentum;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "adamw") return OptimizerKind::adamw;
  throw ValueError(str("--optimizer: must be one of sgd, momentum (SGD with momentum), adam, adamw, got '", name, "'"));
}

const char* optimizer_name(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::momentum: return "momentum";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

int state_buffers(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::sgd: return 0;
    case OptimizerKind::momentum: return 1;
    case OptimizerKind::adam:
    case OptimizerKind::adamw: return 2;
  }
  return 0;
}

}  // namespace weft::optim
