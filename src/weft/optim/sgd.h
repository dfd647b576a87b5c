// SGD with momentum, dampening, weight decay and Nesterov, exactly as torch.optim.SGD:
//
//   d = grad + weight_decay * p
//   buf = d on a parameter's first update, then momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   p -= lr * d
//
// State per parameter: "momentum_buffer" when momentum != 0, none otherwise.
#pragma once
#include "weft/optim/optimizer.h"

namespace weft::optim {

struct SGDOptions {
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2 penalty added to the gradient
  bool nesterov = false;    // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  // Bad hyperparameters (negative lr, momentum or weight decay; Nesterov without momentum or
  // with dampening) → ValueError.
  SGD(std::vector<Tensor> params, double lr, SGDOptions options = {});
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> buffer_names() const override;
  void update(const std::vector<Segment>& segments, double grad_factor) override;

 private:
  SGDOptions options_;
};

}  // namespace weft::optim
