// Whether ops record themselves on the autograd tape (per thread, like torch.is_grad_enabled).
#pragma once

namespace weft {

bool is_grad_enabled();
void set_grad_enabled(bool on);

// Scope with recording set to `on`, restored when it ends.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : previous_(is_grad_enabled()) { set_grad_enabled(on); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Scope with recording off: inference, optimizer updates, and backward itself.
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace weft
