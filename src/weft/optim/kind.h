// OptimizerKind: the names of weft's update rules, one vocabulary for what `weft train` builds
// and what `weft plan` prices by the state each keeps per parameter.
//
//   sgd       plain SGD: no state
//   momentum  SGD with momentum: one buffer (momentum_buffer)
//   adam      Adam: two buffers (exp_avg, exp_avg_sq)
//   adamw     AdamW (decoupled weight decay): the same two buffers as Adam
//
// Invariant: parse_optimizer(optimizer_name(k)) == k, and state_buffers(k) is the number of
// buffers the rule's Optimizer keeps per parameter (optim/sgd.h, optim/adam.h).
#pragma once
#include <string_view>

namespace weft::optim {

enum class OptimizerKind { sgd, momentum, adam, adamw };

// "sgd" | "momentum" | "adam" | "adamw"; ValueError listing them otherwise.
OptimizerKind parse_optimizer(std::string_view name);
const char* optimizer_name(OptimizerKind optimizer);
// Buffers of the parameter's shape the rule keeps: 0, 1, 2, 2.
int state_buffers(OptimizerKind optimizer);

}  // namespace weft::optim
