// Whether ops record themselves on the autograd tape (per thread, like torch.is_grad_enabled).
#pragma once

namespace weft {

bool is_grad_enabled();
void set_grad_enabled(bool on);

// Scope with recording off: inference, optimizer updates, and backward itself.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace weft
