// A training run's state described in the terms of the whole model, whatever the layout, as
// PyTorch DCP's sharded state dict and Megatron's ShardedTensor describe it: each rank says which
// part of which whole tensor it holds, and one generic step each way does the rest.
//
//   - Saving: a rank's CheckpointShard holds the parts it writes (`parts`: where each lies in the
//     whole, flattened) and their values; gather_shard_layout puts every rank's parts together
//     into the index a sharded checkpoint lists (io/sharded_checkpoint.h), so that no layout
//     computes where the other ranks' parts lie.
//   - Resuming: take_parts cuts the whole tensors a checkpoint of any layout holds (one process's
//     files, or shards put together) to the parts a rank holds, so that no layout reads into a
//     whole model to take its share.
//
// Who says what: the parallel plan (dist/parallel_plan.h) for a model split by tensor or pipeline
// parallelism (dist/split_model.h: a stage's tensors, a tensor-parallel rank's slices), its
// data-parallel mode for the optimizer state (ZeRO's pieces, dist/mode_zero.cpp). A rank holds at
// most one part of a tensor; an optimizer's state of a parameter ("NAME.exp_avg") is the same part
// of a tensor of the parameter's shape, and its 0-d values ("NAME.step") whole.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "weft/core/tensor.h"
#include "weft/dist/process_group.h"
#include "weft/dist/tensor_parallel.h"

namespace weft::dist {

// One rank's part of a whole tensor: `run` of its elements, flattened (a Slice: the whole, one
// block, or a block in every row), held as a tensor of `local` shape.
struct TensorPart {
  Shape whole;
  DType dtype = DType::f32;
  Slice run;
  Shape local;
};
// The whole tensor as one part.
TensorPart whole_part(const Shape& shape, DType dtype);

// What one rank contributes to a sharded checkpoint (train/checkpoint.h writes it).
struct CheckpointShard {
  std::map<std::string, Tensor> tensors;  // this rank's parts, flattened: "NAME", "NAME.FIELD", "NAME.step"
  std::map<std::string, TensorPart> parts;  // where each "NAME" of `tensors` lies in the whole
  // The index's "tensors", every rank's parts together (gather_shard_layout); used from rank 0.
  nlohmann::json layout;
};

// Collective over `group` (every rank of the checkpoint): `shard.layout` from every rank's
// `parts`, {"NAME": {"shape", "dtype", "runs": [[rank, begin, length(, count, stride)], ...]}}.
void gather_shard_layout(CheckpointShard& shard, ProcessGroup& group);

// The parts `held` (by name) of `whole`: a state dict of the whole model, or its optimizer's
// ("NAME.FIELD", cut as NAME; 0-d values as they are). Entries of names not held are left out (a
// stage's neighbours'); a whole tensor whose shape is not the part's whole → ShapeError naming it.
std::map<std::string, Tensor> take_parts(const std::map<std::string, Tensor>& whole,
                                         const std::map<std::string, TensorPart>& held);

}  // namespace weft::dist
