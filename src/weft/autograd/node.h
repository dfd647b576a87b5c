// The autograd tape. Every differentiable op that sees an input requiring grad creates a Node
// for its backward and links its outputs to it (TensorImpl::grad_fn). A Node's next_edges point
// to the Nodes that produced its inputs (or to a leaf's AccumulateGrad), so the graph is built
// while the forward runs (define-by-run) and walked backwards by run_backward().
//
// Invariants: a Node's backward returns one gradient per next edge (undefined = no gradient);
// gradients arrive summed over all uses of an output before the Node runs; sequence numbers
// grow with creation order, and the engine runs ready Nodes latest-first, which is the reverse
// of the forward order that DDP's bucketing relies on.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  int input_nr = 0;            // which of node's gradient inputs this edge feeds
  Shape shape;                 // the input's shape and dtype: its gradient must match them
  DType dtype = DType::f32;
};

class Node {
 public:
  explicit Node(std::string name, int num_outputs = 1);
  virtual ~Node() = default;

  // Gradients w.r.t. this op's inputs, given gradients w.r.t. its outputs (undefined entries
  // for outputs that received none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) = 0;
  // Drops saved tensors once the graph has been used (unless retain_graph).
  virtual void release() {}

  const std::string& name() const { return name_; }
  int num_outputs() const { return num_outputs_; }
  uint64_t sequence_nr() const { return sequence_nr_; }

  std::vector<Edge> next_edges;
  // What the backward costs beyond reading its incoming and writing its outgoing gradients, for
  // the profiler: set by ops that know it (set_backward_cost), while a profiler is attached.
  double backward_flops = 0, backward_saved_bytes = 0;

 private:
  std::string name_;
  int num_outputs_;
  uint64_t sequence_nr_;
};

// The Node of a recorded op: a closure over what the backward needs (saved inputs, outputs).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, int num_outputs, BackwardFn backward);
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;
  void release() override { backward_ = nullptr; }

 private:
  BackwardFn backward_;
};

// Sums incoming gradients into a leaf's .grad, then fires its grad-ready hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// Records an op: if grad mode is on and any input requires grad, `outputs` get a FunctionNode
// named `name` whose backward receives one gradient per output (undefined where none arrived;
// for single-output ops it is given a zero-filled tensor instead, never undefined) and returns one
// per input. Returns whether it recorded.
bool record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward);

// For a backward that touches few rows of an input's gradient (embedding's weight): the gradient
// gathered so far for input `input` of the node whose backward is running, made private to the
// engine so the caller may add into it in place and return an undefined gradient for that input,
// instead of a dense one the engine would then sum. Null when none has arrived yet, when that
// input needs no gradient, or outside a backward the engine runs.
Tensor* gathered_gradient(size_t input);

// Tells the profiler what the backward of `out`'s grad_fn will cost: its FLOPs and the bytes of
// saved tensors it reads. Nothing when `out` has no grad_fn.
void set_backward_cost(const Tensor& out, double flops, double saved_bytes);

// The edge a gradient for `t` must flow into (empty when t needs none).
Edge gradient_edge(const Tensor& t);

// Runs backward from `roots` seeded with `grads`.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

}  // namespace weft::autograd
