#include "weft/dist/split_model.h"

#include <cmath>
#include <functional>

namespace weft::dist {

RankLayout RankLayout::of(int world, int tp, int pp) {
  const std::string flags = tp > 1 && pp > 1 ? str("--tp ", tp, " --pp ", pp) : tp > 1 ? str("--tp ", tp) : str("--pp ", pp);
  WEFT_CHECK(world % (tp * pp) == 0, ValueError, flags, ": ", tp > 1 && pp > 1 ? str("tp x pp = ", tp * pp, " ") : "",
             "must divide the launch's ", world, " ranks (the ranks / ", tp > 1 && pp > 1 ? "(tp x pp)" : tp > 1 ? "tp" : "pp",
             " that remain are data-parallel replicas)");
  return {.tp = tp, .pp = pp, .replicas = world / (tp * pp)};
}

std::string RankLayout::describe() const {
  // Each group's ranks, the groups in the order of their first rank.
  auto groups = [](int count_outer, int count_inner, int size, const std::function<int(int, int, int)>& rank_of) {
    std::string text;
    for (int a = 0; a < count_outer; ++a)
      for (int b = 0; b < count_inner; ++b) {
        text += text.empty() ? "[" : " [";
        for (int i = 0; i < size; ++i) text += str(i == 0 ? "" : " ", rank_of(a, b, i));
        text += "]";
      }
    return text;
  };
  std::vector<std::string> parts;
  if (tp > 1)
    parts.push_back("tensor-parallel groups " +
                    groups(pp, replicas, tp, [&](int s, int d, int t) { return rank_of(s, d, t); }));
  if (pp > 1)
    parts.push_back("pipeline groups (stage by stage) " +
                    groups(replicas, tp, pp, [&](int d, int t, int s) { return rank_of(s, d, t); }));
  if (replicas > 1 && (tp > 1 || pp > 1))
    parts.push_back("data-parallel groups " + groups(pp, tp, replicas, [&](int s, int t, int d) { return rank_of(s, d, t); }));
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

SplitGroups split_groups(ProcessGroup& world, const RankLayout& layout) {
  const int rank = world.rank();
  const int tp_rank = layout.tp_rank(rank), replica = layout.replica(rank), stage = layout.stage(rank);
  SplitGroups g;
  // Every rank takes part in every split, in the same order: split is collective.
  if (layout.tp > 1) g.tp = world.split(layout.rank_of(stage, replica, 0), rank);
  if (layout.pp > 1) g.pp = world.split(layout.rank_of(0, replica, tp_rank), stage);
  if (layout.tp > 1 || layout.pp > 1) g.data = world.split(layout.rank_of(stage, 0, tp_rank), replica);
  return g;
}

double split_model_grad_norm(const std::vector<std::string>& names, const std::vector<double>& squares,
                             const TensorParallelLayout& tp_layout, const RankLayout& layout, int64_t layers,
                             bool sharded_over_replicas, ProcessGroup& world) {
  WEFT_CHECK(names.size() == squares.size(), ValueError, "split_model_grad_norm: ", squares.size(), " squares for ",
             names.size(), " parameters");
  const int64_t stage = layout.stage(world.rank());
  const double replicas = sharded_over_replicas ? 1.0 : static_cast<double>(layout.replicas);
  const nn::GPTPartition partition{layers, layout.pp};
  double mine = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (partition.stage_of(names[i]) != stage) continue;  // the tied table's copy
    const double holders = (tp_layout.contains(names[i]) ? 1.0 : static_cast<double>(layout.tp)) * replicas;
    mine += squares[i] / holders;
  }
  Tensor total = Tensor::scalar(mine, DType::f64);
  world.all_reduce(total, ReduceOp::sum);
  return std::sqrt(total.item());
}

std::map<std::string, TensorPart> split_model_parts(const nn::Module& model, const TensorParallelLayout& tp_layout,
                                                    const RankLayout& layout, int rank) {
  std::map<std::string, TensorPart> parts;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto split = tp_layout.find(name);
    if (split == tp_layout.end()) {
      parts[name] = whole_part(p.shape(), p.dtype());
      continue;
    }
    const ShardedParameter& s = split->second;
    parts[name] = {.whole = s.whole, .dtype = p.dtype(), .run = s.split.slice(s.whole, layout.tp_rank(rank), layout.tp),
                   .local = p.shape()};
  }
  return parts;
}

CheckpointShard split_model_shard(const nn::Module& model, const std::map<std::string, Tensor>& optimizer_state,
                                  const TensorParallelLayout& tp_layout, const RankLayout& layout, int rank,
                                  int64_t layers) {
  WEFT_CHECK(model.named_buffers().empty(), ValueError, "a sharded checkpoint of a split model: ", model.name(),
             " has buffers, which only a GPT's split is written for");
  CheckpointShard shard;
  if (layout.replica(rank) != 0) return shard;
  const std::map<std::string, TensorPart> parts = split_model_parts(model, tp_layout, layout, rank);
  const nn::GPTPartition partition{layers, layout.pp};
  auto flat = [](const Tensor& t) { return t.dim() == 0 ? t.clone() : t.contiguous().reshape({t.numel()}).clone(); };
  for (const auto& [name, p] : model.named_parameters()) {
    if (partition.stage_of(name) != layout.stage(rank)) continue;  // the tied table's copy
    if (!tp_layout.contains(name) && layout.tp_rank(rank) != 0) continue;
    shard.parts[name] = parts.at(name);
    shard.tensors[name] = flat(p.detach());
    for (auto it = optimizer_state.lower_bound(name + "."); it != optimizer_state.end() && it->first.starts_with(name + "."); ++it)
      if (it->first.find('.', name.size() + 1) == std::string::npos) shard.tensors[it->first] = flat(it->second);
  }
  return shard;
}

}  // namespace weft::dist
