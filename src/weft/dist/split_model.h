// What a GPT split by tensor parallelism (--parallel tp, dist/tensor_parallel.h), pipeline
// parallelism (pp, dist/pipeline.h) or both, with data-parallel replicas of the split model around
// them, changes in training (the parallel plan, dist/parallel_plan.h, calls these): where each rank
// sits and its groups, the norm of the whole model's gradient for clipping, and the part of the
// whole model a rank holds, which its checkpoint shard writes and a resume fills.
//
// Ranks are laid out as Megatron-LM lays them out: tensor parallel innermost (its all-reduces in
// every block are the heaviest traffic, kept on one machine where it can be), then the replicas,
// then the pipeline stages outermost (a stage sends one activation per micro-batch):
//
//   rank = (stage * replicas + replica) * tp + tp_rank
//
//   8 ranks, tp 2, pp 2, 2 replicas: tensor-parallel groups [0 1] [2 3] [4 5] [6 7];
//   pipeline groups [0 4] [1 5] [2 6] [3 7]; data-parallel groups [0 2] [1 3] [4 6] [5 7]
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/dist/pipeline.h"
#include "weft/dist/process_group.h"
#include "weft/dist/sharded_state.h"
#include "weft/dist/tensor_parallel.h"
#include "weft/nn/module.h"

namespace weft::dist {

struct RankLayout {
  int tp = 1, pp = 1, replicas = 1;

  // tp x pp that does not divide `world` → ValueError naming the flags.
  static RankLayout of(int world, int tp, int pp);
  int tp_rank(int rank) const { return rank % tp; }
  int replica(int rank) const { return rank / tp % replicas; }
  int stage(int rank) const { return rank / (tp * replicas); }
  int rank_of(int stage, int replica, int tp_rank) const { return (stage * replicas + replica) * tp + tp_rank; }
  // "tensor-parallel groups [0 1] [2 3]; pipeline groups (stage by stage) [0 4] [1 5] ...; data-
  // parallel groups [0 2] ...", the dimensions of more than one rank only.
  std::string describe() const;
};

// This rank's groups: tensor-parallel (tp > 1), pipeline (pp > 1, its ranks in stage order), and
// data-parallel across the replicas (when tp or pp splits the model). Collective over `world`.
struct SplitGroups {
  std::unique_ptr<ProcessGroup> tp, pp, data;
};
SplitGroups split_groups(ProcessGroup& world, const RankLayout& layout);

// The 2-norm of the whole model's gradient (what clipping needs), from every rank's share;
// collective over `world`. `squares[i]`: the squared norm of this rank's gradient of `names[i]`,
// its share of the whole model's parameter (a tensor-parallel slice, a stage's, a ZeRO shard's
// piece). Each is counted once: a parameter every tensor-parallel rank holds whole (the norms,
// the row-parallel biases) over tp, one the replicas hold alike over the replicas (unless
// `sharded_over_replicas`: ZeRO's pieces are apart), and the last stage's copy of the tied table
// not at all.
double split_model_grad_norm(const std::vector<std::string>& names, const std::vector<double>& squares,
                             const TensorParallelLayout& tp_layout, const RankLayout& layout, int64_t layers,
                             bool sharded_over_replicas, ProcessGroup& world);

// How optimizer state goes into and comes out of a checkpoint (train/checkpoint.h): one process's
// state, keyed by the model's parameter names. A sharded optimizer (ZeRO) gathers its shards in
// `save` and takes its shards in `load`.
struct OptimizerStateIO {
  std::string name;  // the optimizer's ("AdamW"), which a resume must match
  std::function<std::map<std::string, Tensor>()> save;
  // `keyed_by_name` false: a checkpoint written before state was keyed by name, keyed by position.
  std::function<void(const std::map<std::string, Tensor>& dict, bool keyed_by_name)> load;
};

// The part of the whole model each of this rank's parameters is (dist/sharded_state.h): a
// tensor-parallel rank's slice of a split one, the whole of the others (a stage's own).
std::map<std::string, TensorPart> split_model_parts(const nn::Module& model, const TensorParallelLayout& tp_layout,
                                                    const RankLayout& layout, int rank);

// This rank's part of a sharded checkpoint: on the first replica's ranks, the parameters of its
// stage (the last stage's copy of the tied table left out) or its slices of them, with their
// optimizer state; a parameter every tensor-parallel rank holds whole is written by the group's
// first. `optimizer_state` is one process's optimizer state of this rank's parameters, keyed by
// name (under ZeRO-1, gathered over the replicas).
CheckpointShard split_model_shard(const nn::Module& model, const std::map<std::string, Tensor>& optimizer_state,
                                  const TensorParallelLayout& tp_layout, const RankLayout& layout, int rank,
                                  int64_t layers);

}  // namespace weft::dist
