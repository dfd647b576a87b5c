// Activation checkpointing, as torch.utils.checkpoint: a block's forward runs without recording,
// so none of its intermediate activations stay alive; backward runs the block's forward again,
// this time recording, and backpropagates through that recomputed graph. Memory for
// activations drops to the block boundaries plus one block at a time, for one more forward.
//
// Invariants: gradients equal the plain run's (the recomputation sees the same input, the same
// parameters, the forward's autocast state and, through a saved and restored default-generator
// state, the same dropout masks);
// the block's parameters receive their gradients during the recomputation's own backward, so a
// parameter's grad-ready hooks fire then. `params` must list every tensor the block reads that
// may require grad: they make the checkpoint record even when the input needs no gradient (the
// first block of a network).
#pragma once
#include <functional>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::autograd {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& block, const Tensor& input,
                  const std::vector<Tensor>& params);

}  // namespace weft::autograd
