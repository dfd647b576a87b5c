#include "weft/autograd/checkpoint.h"

#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/core/random.h"

namespace weft::autograd {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& block, const Tensor& input,
                  const std::vector<Tensor>& params) {
  if (!is_grad_enabled()) return block(input);
  const auto rng = default_generator().state();
  const std::optional<DType> low_precision = autocast_dtype();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = block(input);
  }
  std::vector<Tensor> inputs = {input};
  inputs.insert(inputs.end(), params.begin(), params.end());
  record("checkpoint", inputs, {out}, [block, input = input.detach(), needs_input_grad = input.requires_grad(), rng,
                                       low_precision, num_params = params.size()](const std::vector<Tensor>& g) {
    Tensor x = input.detach();
    if (needs_input_grad) x.requires_grad_();
    Tensor recomputed;
    {
      GradModeGuard record(true);  // backward runs with recording off; the recomputation must record
      AutocastGuard autocast(low_precision);
      const auto now = default_generator().state();
      default_generator().set_state(rng);
      recomputed = block(x);
      default_generator().set_state(now);
    }
    if (recomputed.requires_grad()) run_backward({recomputed}, {g[0]}, /*retain_graph=*/false);
    std::vector<Tensor> grads(1 + num_params);  // the parameters already hold theirs
    if (needs_input_grad) grads[0] = x.grad();
    return grads;
  });
  return out;
}

}  // namespace weft::autograd
