// Adam and AdamW, one implementation, exactly as torch.optim.Adam / torch.optim.AdamW:
//
//   Adam:  g = grad + weight_decay * p                (L2 penalty through the gradient)
//   AdamW: p *= 1 - lr * weight_decay                 (decoupled weight decay), g = grad
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// with t the parameter's own step count. State per parameter: "exp_avg" (m), "exp_avg_sq" (v).
#pragma once
#include "weft/optim/optimizer.h"

namespace weft::optim {

struct AdamOptions {
  double lr = 1e-3;  // initial; Optimizer::lr() holds the current one
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

// AdamW's defaults differ from Adam's only in weight_decay, as in PyTorch.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class Adam : public Optimizer {
 public:
  // Bad hyperparameters (negative lr, eps or weight decay; a beta outside [0, 1)) → ValueError.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::string name, std::vector<Tensor> params, AdamOptions options);
  std::vector<std::string> buffer_names() const override;
  void update(const std::vector<Segment>& segments, double grad_factor) override;

 private:
  AdamOptions options_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

}  // namespace weft::optim
