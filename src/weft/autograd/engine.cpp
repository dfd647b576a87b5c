// The backward engine and the autograd half of Tensor's API.
#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/monitor/profiler.h"

namespace weft {

static thread_local bool grad_enabled = true;
bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool on) { grad_enabled = on; }

static thread_local std::optional<DType> autocast_type;
std::optional<DType> autocast_dtype() { return autocast_type; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(autocast_type) {
  if (dtype == DType::f32) dtype.reset();
  WEFT_CHECK(!dtype || *dtype == DType::bf16 || *dtype == DType::f16, ValueError,
             "autocast: the low-precision type must be bf16 or f16, got ", dtype_name(*dtype));
  autocast_type = dtype;
}

AutocastGuard::~AutocastGuard() { autocast_type = previous_; }

namespace autograd {

static std::atomic<uint64_t> next_sequence_nr{0};

Node::Node(std::string name, int num_outputs)
    : name_(std::move(name)), num_outputs_(num_outputs), sequence_nr_(next_sequence_nr++) {}

// The bytes a backward moved, for the profiler: the saved tensors it read, and its incoming and
// returned gradients, unless every returned gradient is a view of an incoming one (a view op's
// backward), which moves nothing.
static double backward_bytes(const std::vector<Tensor>& incoming, const std::vector<Tensor>& returned, double saved) {
  double fresh = 0;
  for (const Tensor& g : returned)
    if (g.defined() && std::none_of(incoming.begin(), incoming.end(), [&](const Tensor& in) {
          return in.defined() && in.storage().data() == g.storage().data();
        }))
      fresh += static_cast<double>(g.nbytes());
  return fresh > 0 ? saved + fresh + monitor::bytes_of(incoming) : saved;
}

FunctionNode::FunctionNode(std::string name, int num_outputs, BackwardFn backward)
    : Node(std::move(name), num_outputs), backward_(std::move(backward)) {}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>& grad_outputs) {
  WEFT_CHECK(backward_ != nullptr, Error, "backward through '", name(),
             "' a second time: its saved tensors were freed by the first backward; pass "
             "retain_graph=true to the first backward() to keep them");
  if (num_outputs() == 1 && !grad_outputs[0].defined()) return std::vector<Tensor>(next_edges.size());
  monitor::Scope scope(monitor::ScopeKind::backward, name().c_str(), grad_outputs);
  std::vector<Tensor> grads = backward_(grad_outputs);
  if (scope.active()) scope.set_cost(backward_flops, backward_bytes(grad_outputs, grads, backward_saved_bytes));
  return grads;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grad_outputs) {
  Tensor& incoming = grad_outputs[0];
  Tensor& grad = leaf_->grad;
  {  // the scope ends before the hooks, which are not part of accumulating
    monitor::OpScope scope(Op::accumulate_grad, {incoming});
    if (!grad.defined()) {
      // Take the incoming buffer when nobody else can see it; otherwise keep a private copy so a
      // later in-place accumulation cannot write into another tensor.
      bool exclusive = incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1 &&
                       incoming.is_contiguous();
      grad = exclusive ? incoming : Tensor::empty(incoming.shape(), incoming.dtype()).copy_(incoming);
      if (scope.active()) scope.set_cost(0, exclusive ? 0 : 2.0 * incoming.nbytes());
    } else {
      cpu::add_(grad, incoming);
      if (scope.active()) scope.set_cost(static_cast<double>(incoming.numel()), 3.0 * incoming.nbytes());
    }
  }
  Tensor leaf(leaf_);
  leaf_->grad_ready_hooks.for_each([&](const auto& hook) { hook(leaf); });
  return {};
}

void set_backward_cost(const Tensor& out, double flops, double saved_bytes) {
  if (Node* node = out.grad_fn().get()) {
    node->backward_flops = flops;
    node->backward_saved_bytes = saved_bytes;
  }
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr, t.shape(), t.dtype()};
  if (!impl->requires_grad) return {};
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return {acc, 0, t.shape(), t.dtype()};
}

bool record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward) {
  if (!is_grad_enabled()) return false;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return false;
  auto node = std::make_shared<FunctionNode>(name, static_cast<int>(outputs.size()), std::move(backward));
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].impl()->grad_fn = node;
    outputs[i].impl()->output_nr = static_cast<int>(i);
    outputs[i].impl()->requires_grad = true;
  }
  return true;
}

namespace {

using GradientBuffers = std::unordered_map<Node*, std::vector<Tensor>>;

// The node whose backward the engine is running on this thread, and the engine's buffers of
// gradients gathered so far; a backward that runs backward itself (checkpointing) nests.
struct RunningNode {
  Node* node;
  GradientBuffers* buffers;
};
thread_local const RunningNode* running = nullptr;

class RunningNodeScope {
 public:
  explicit RunningNodeScope(const RunningNode* node) : previous_(running) { running = node; }
  ~RunningNodeScope() { running = previous_; }
  RunningNodeScope(const RunningNodeScope&) = delete;
  RunningNodeScope& operator=(const RunningNodeScope&) = delete;

 private:
  const RunningNode* previous_;
};

}  // namespace

Tensor* gathered_gradient(size_t input) {
  if (!running || input >= running->node->next_edges.size()) return nullptr;
  const Edge& e = running->node->next_edges[input];
  if (!e.node) return nullptr;
  auto it = running->buffers->find(e.node.get());
  if (it == running->buffers->end() || !it->second[e.input_nr].defined()) return nullptr;
  Tensor& slot = it->second[e.input_nr];
  const bool exclusive =
      slot.impl_ptr().use_count() == 1 && slot.storage().use_count() == 1 && slot.is_contiguous();
  if (!exclusive) slot = Tensor::empty(slot.shape(), slot.dtype()).copy_(slot);
  return &slot;
}

static void accumulate(Tensor& slot, const Tensor& grad) {
  if (!slot.defined()) slot = grad;
  else slot = cpu::add(slot, grad);
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  NoGradGuard no_grad;
  std::unordered_map<Node*, int> dependencies;
  GradientBuffers buffers;
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge edge = gradient_edge(roots[i]);
    WEFT_CHECK(edge.node != nullptr, Error, "backward: tensor ", i, " of shape ",
               shape_str(roots[i].shape()), " does not require grad and has no grad_fn");
    auto& buffer = buffers[edge.node.get()];
    buffer.resize(edge.node->num_outputs());
    accumulate(buffer[edge.input_nr], grads[i]);
    root_nodes.push_back(edge.node);
  }
  // Count, for every reachable node, how many edges lead into it.
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& n : root_nodes)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr() < b->sequence_nr();
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)>
      ready(later_first);
  std::unordered_set<Node*> queued;
  for (auto& n : root_nodes)
    if (dependencies[n.get()] == 0 && queued.insert(n.get()).second) ready.push(n);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    inputs.resize(node->num_outputs());
    bool any = false;
    for (const Tensor& g : inputs) any = any || g.defined();
    std::vector<Tensor> outputs(node->next_edges.size());
    if (any) {
      const RunningNode here{node.get(), &buffers};
      RunningNodeScope scope(&here);
      outputs = node->apply(inputs);
    }
    if (!retain_graph) node->release();
    WEFT_CHECK(outputs.size() == node->next_edges.size(), Error, "autograd: backward of '",
               node->name(), "' returned ", outputs.size(), " gradients for ",
               node->next_edges.size(), " inputs");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (outputs[i].defined()) {
        WEFT_CHECK(outputs[i].shape() == e.shape && outputs[i].dtype() == e.dtype, Error,
                   "autograd: backward of '", node->name(), "' returned a ",
                   dtype_name(outputs[i].dtype()), " gradient of shape ", shape_str(outputs[i].shape()),
                   " for input ", i, " which is ", dtype_name(e.dtype), " ", shape_str(e.shape));
        auto& buffer = buffers[e.node.get()];
        buffer.resize(e.node->num_outputs());
        accumulate(buffer[e.input_nr], outputs[i]);
      }
      if (--dependencies[e.node.get()] == 0) ready.push(e.node);
    }
  }
}

}  // namespace autograd

bool Tensor::requires_grad() const { return impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  WEFT_CHECK(is_leaf(), ValueError, "requires_grad_: only leaf tensors can change requires_grad; "
             "use detach() to make a leaf from a computed tensor");
  WEFT_CHECK(!on || is_floating(dtype()), DTypeError,
             "requires_grad_: only floating-point tensors can require grad, got ", dtype_name(dtype()));
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return impl_->grad_fn == nullptr; }
const Tensor& Tensor::grad() const { return impl_->grad; }

void Tensor::set_grad(const Tensor& grad) const {
  WEFT_CHECK(!grad.defined() || (grad.shape() == shape() && grad.dtype() == dtype()), ShapeError,
             "set_grad: gradient ", dtype_name(grad.dtype()), " ", shape_str(grad.shape()),
             " does not match tensor ", dtype_name(dtype()), " ", shape_str(shape()));
  impl_->grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return impl_->grad_fn; }

Tensor Tensor::detach() const { return as_strided(shape(), strides(), storage_offset()); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  Tensor seed = gradient;
  if (!seed.defined()) {
    WEFT_CHECK(numel() == 1, ShapeError, "backward: gradient can be implicit only for a one-element "
               "output, this one has shape ", shape_str(shape()), "; pass a gradient");
    seed = Tensor::ones(shape(), dtype());
  }
  WEFT_CHECK(seed.shape() == shape(), ShapeError, "backward: gradient of shape ",
             shape_str(seed.shape()), " for a tensor of shape ", shape_str(shape()));
  autograd::run_backward({*this}, {seed}, retain_graph);
}

RemovableHandle Tensor::register_grad_ready_hook(std::function<void(const Tensor&)> hook) const {
  WEFT_CHECK(is_leaf() && requires_grad(), ValueError,
             "register_grad_ready_hook: only leaves that require grad have a final gradient");
  return impl_->grad_ready_hooks.add(std::move(hook));
}

}  // namespace weft
