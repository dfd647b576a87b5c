// HookList and RemovableHandle: callbacks kept in registration order, each removable through the
// handle its registration returned (torch.utils.hooks.RemovableHandle). Modules keep their
// forward hooks in HookLists, tensors their gradient-ready hooks.
//
// Invariants:
//   - A handle never keeps its list alive: remove() after the owner (a module, a tensor) died,
//     remove() twice, or remove() on a default-constructed handle does nothing.
//   - for_each runs the hooks registered when it started, in registration order; a hook may
//     register or remove hooks, itself included, and the change takes effect from the next run
//     (torch iterates over a copy of its hook dict the same way). A hook that removes itself
//     stays alive until it returns.
//   - An empty list is one null pointer: empty() is the whole cost of a call site with no hooks,
//     and a TensorImpl or Module that never gets a hook allocates nothing for them.
// Not thread-safe: register and remove from the thread that runs the hooks (or while none run).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace weft {

namespace detail {
struct HookRegistry {
  virtual ~HookRegistry() = default;
  virtual void remove(uint64_t id) = 0;
};
}  // namespace detail

class RemovableHandle {
 public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<detail::HookRegistry> registry, uint64_t id) : registry_(std::move(registry)), id_(id) {}
  void remove() {
    if (auto registry = registry_.lock()) registry->remove(id_);
    registry_.reset();
  }

 private:
  std::weak_ptr<detail::HookRegistry> registry_;
  uint64_t id_ = 0;
};

template <typename Fn>
class HookList {
 public:
  RemovableHandle add(Fn fn) {
    if (!registry_) registry_ = std::make_shared<Registry>();
    const uint64_t id = registry_->next_id++;
    registry_->hooks.emplace_back(id, std::make_shared<const Fn>(std::move(fn)));
    return RemovableHandle(registry_, id);
  }
  bool empty() const { return !registry_ || registry_->hooks.empty(); }
  size_t size() const { return registry_ ? registry_->hooks.size() : 0; }

  // Calls visit(const Fn&) for each hook registered when the call started.
  template <typename Visit>
  void for_each(Visit&& visit) const {
    if (empty()) return;
    std::vector<std::shared_ptr<const Fn>> snapshot;
    snapshot.reserve(registry_->hooks.size());
    for (const auto& [id, fn] : registry_->hooks) snapshot.push_back(fn);
    for (const auto& fn : snapshot) visit(*fn);
  }

 private:
  struct Registry : detail::HookRegistry {
    std::vector<std::pair<uint64_t, std::shared_ptr<const Fn>>> hooks;
    uint64_t next_id = 0;
    void remove(uint64_t id) override {
      std::erase_if(hooks, [id](const auto& entry) { return entry.first == id; });
    }
  };
  std::shared_ptr<Registry> registry_;
};

}  // namespace weft
