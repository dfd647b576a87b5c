// The backward engine: accumulation into .grad, grad mode, retain_graph and the release of saved
// tensors, detach, the grad-ready hooks DDP relies on (once per leaf, final value, reverse order of
// use), and the errors for misuse.
#include "expect_error.h"
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/core/error.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"

namespace weft {
namespace {

using V = std::vector<double>;

Tensor leaf(const V& values) {
  Tensor t = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::f64);
  t.requires_grad_();
  return t;
}

V grad_of(const Tensor& t) {
  EXPECT_TRUE(t.grad().defined());
  return t.grad().defined() ? t.grad().to_vector<double>() : V{};
}

using weft::testing::message_of;
using weft::testing::contains;

TEST(AutogradTest, LeavesAndRecordedOutputs) {
  Tensor x = leaf({1, 2});
  Tensor c = Tensor::from_vector({3, 4}, {2}, DType::f64);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_EQ(x.grad_fn(), nullptr);
  Tensor y = mul(x, c);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "mul");
  EXPECT_EQ(y.grad_fn()->next_edges.size(), 2u);
  EXPECT_EQ(y.grad_fn()->next_edges[1].node, nullptr);  // c needs no gradient
  Tensor z = mul(c, c);  // nothing requires grad: nothing recorded
  EXPECT_EQ(z.grad_fn(), nullptr);
  EXPECT_FALSE(z.requires_grad());
  sum(y).backward();
  EXPECT_EQ(grad_of(x), (V{3, 4}));
  EXPECT_FALSE(c.grad().defined());
}

TEST(AutogradTest, BackwardAccumulatesIntoGradAcrossCalls) {
  Tensor x = leaf({1, 2, 3});
  sum(mul(x, x)).backward();
  EXPECT_EQ(grad_of(x), (V{2, 4, 6}));
  sum(mul(x, 3.0)).backward();  // a fresh graph adds onto the existing .grad
  EXPECT_EQ(grad_of(x), (V{5, 7, 9}));
  x.set_grad({});
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(grad_of(x), (V{3, 3, 3}));
  EXPECT_THROW(x.set_grad(Tensor::zeros({2}, DType::f64)), ShapeError);
  EXPECT_THROW(x.set_grad(Tensor::zeros({3}, DType::f32)), ShapeError);
}

TEST(AutogradTest, LeafUsedTwiceGetsTheSummedGradient) {
  Tensor x = leaf({1, -2, 0.5});
  Tensor w = leaf({2, 3, 4});
  // x feeds mul, add and exp: d/dx sum(x*w + x + exp(x)) = w + 1 + exp(x).
  sum(add(add(mul(x, w), x), exp(x))).backward();
  V g = grad_of(x);
  V want = {2 + 1 + std::exp(1.0), 3 + 1 + std::exp(-2.0), 4 + 1 + std::exp(0.5)};
  for (size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], want[i]);
  EXPECT_EQ(grad_of(w), (V{1, -2, 0.5}));
}

TEST(AutogradTest, NoGradGuardDisablesRecording) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = mul(add(x, x), 2.0);
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(y.to_vector<double>(), (V{4, 8}));
    {
      NoGradGuard nested;
      EXPECT_FALSE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());  // the nested guard restores "off", not "on"
    EXPECT_THROW(sum(y).backward(), Error);
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_NE(mul(x, 2.0).grad_fn(), nullptr);
}

TEST(AutogradTest, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2});
  Tensor w = leaf({5, 7});
  Tensor y = sum(mul(exp(x), w));
  y.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(grad_of(w), (V{std::exp(1.0), std::exp(2.0)}));
  y.backward();  // retained: runs again and accumulates, then frees
  EXPECT_EQ(grad_of(w), (V{2 * std::exp(1.0), 2 * std::exp(2.0)}));
  EXPECT_DOUBLE_EQ(grad_of(x)[1], 2 * 7 * std::exp(2.0));
  std::string message = message_of<Error>([&] { y.backward(); });
  EXPECT_TRUE(contains(message, "retain_graph")) << message;
  EXPECT_EQ(grad_of(w), (V{2 * std::exp(1.0), 2 * std::exp(2.0)}));  // the failed pass added nothing
}

TEST(AutogradTest, SecondBackwardWithoutRetainGraphThrows) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(mul(x, x));
  y.backward();
  std::string message = message_of<Error>([&] { y.backward(); });
  EXPECT_TRUE(contains(message, "retain_graph")) << message;
  EXPECT_TRUE(contains(message, "sum")) << message;  // names the op whose tensors are gone
}

TEST(AutogradTest, BackwardReleasesSavedTensors) {
  Tensor x = leaf({0.5, 1.5, 2.5});
  Tensor h = exp(x);        // saves its output (a detached alias of h's storage)
  Tensor z = sum(mul(h, h));  // saves h twice
  long impl_uses = h.impl_ptr().use_count();
  long storage_uses = h.storage().use_count();
  EXPECT_GE(impl_uses, 3);
  EXPECT_GE(storage_uses, 2);

  z.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(h.impl_ptr().use_count(), impl_uses);  // retained: still saved
  EXPECT_EQ(h.storage().use_count(), storage_uses);

  z.backward();
  EXPECT_EQ(h.impl_ptr().use_count(), 1);  // only our handle is left
  EXPECT_EQ(h.storage().use_count(), 1);
  V g = grad_of(x);  // two passes of d/dx exp(x)^2 = 2 exp(2x)
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 4 * std::exp(2 * x.at({int64_t(i)})), 1e-9);
}

TEST(AutogradTest, DetachSharesStorageAndStopsGradients) {
  Tensor x = leaf({1, 2, 3});
  Tensor w = leaf({4, 5, 6});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
  EXPECT_EQ(d.storage().data(), y.storage().data());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.grad_fn(), nullptr);
  sum(mul(d, w)).backward();
  EXPECT_EQ(grad_of(w), (V{2, 4, 6}));
  EXPECT_FALSE(x.grad().defined());  // the path through d is cut
  d.fill_(0);
  EXPECT_EQ(y.to_vector<double>(), (V{0, 0, 0}));  // same bytes
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_EQ(x.detach().storage().data(), x.storage().data());
}

TEST(AutogradTest, GradReadyHookFiresOncePerLeafWithTheFinalGradient) {
  Tensor x = leaf({1, 2});
  Tensor w = leaf({3, -1});
  int x_calls = 0, w_calls = 0;
  V x_seen, w_seen;
  x.register_grad_ready_hook([&](const Tensor& t) {
    ++x_calls;
    EXPECT_TRUE(t.is_same(x));
    x_seen = t.grad().to_vector<double>();
  });
  w.register_grad_ready_hook([&](const Tensor& t) {
    ++w_calls;
    w_seen = t.grad().to_vector<double>();
  });
  // x has three uses; its hook must see their sum, not a partial one: 2x*w + w + 1.
  sum(add(add(mul(mul(x, x), w), mul(x, w)), x)).backward();
  EXPECT_EQ(x_calls, 1);
  EXPECT_EQ(w_calls, 1);
  EXPECT_EQ(x_seen, (V{2 * 1 * 3 + 3 + 1, 2 * 2 * -1 + -1 + 1}));
  EXPECT_EQ(w_seen, (V{1 + 1, 4 + 2}));
  EXPECT_EQ(x_seen, grad_of(x));

  sum(mul(x, w)).backward();  // second pass: once more each, seeing the accumulated value
  EXPECT_EQ(x_calls, 2);
  EXPECT_EQ(w_calls, 2);
  EXPECT_EQ(x_seen, (V{10 + 3, -4 - 1}));
  EXPECT_EQ(w_seen, (V{2 + 1, 6 + 2}));

  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.register_grad_ready_hook([](const Tensor&) {}), ValueError);
  EXPECT_THROW(Tensor::zeros({2}).register_grad_ready_hook([](const Tensor&) {}), ValueError);
}

TEST(AutogradTest, GradReadyHookHandlesRemoveTheirHook) {
  Tensor x = leaf({1, 2});
  int kept = 0, removed = 0, once = 0;
  RemovableHandle keep = x.register_grad_ready_hook([&](const Tensor&) { ++kept; });
  RemovableHandle drop = x.register_grad_ready_hook([&](const Tensor&) { ++removed; });
  // A one-shot hook removes itself while it runs.
  RemovableHandle one_shot;
  one_shot = x.register_grad_ready_hook([&](const Tensor&) {
    ++once;
    one_shot.remove();
  });
  sum(mul(x, x)).backward();
  drop.remove();
  sum(mul(x, x)).backward();
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(once, 1);
  drop.remove();  // twice: nothing happens
  {
    Tensor short_lived = leaf({3});
    drop = short_lived.register_grad_ready_hook([](const Tensor&) {});
  }
  drop.remove();  // after the tensor died: nothing happens
}

TEST(AutogradTest, HooksFireInReverseOrderOfUse) {
  Tensor x = leaf({1, 2}), w1 = leaf({3, 4}), w2 = leaf({5, 6}), w3 = leaf({7, 8});
  std::vector<std::string> order;
  auto hook = [&](const char* name) { return [&order, name](const Tensor&) { order.push_back(name); }; };
  x.register_grad_ready_hook(hook("x"));
  w1.register_grad_ready_hook(hook("w1"));
  w2.register_grad_ready_hook(hook("w2"));
  w3.register_grad_ready_hook(hook("w3"));
  sum(mul(mul(mul(x, w1), w2), w3)).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w3", "w2", "w1", "x"}));
  EXPECT_EQ(grad_of(w2), (V{1 * 3 * 7, 2 * 4 * 8}));
  EXPECT_EQ(grad_of(x), (V{3 * 5 * 7, 4 * 6 * 8}));
}

TEST(AutogradTest, GradientsOfDifferentLeavesNeverAlias) {
  // add's backward hands the very same gradient tensor to both inputs; each leaf must end up
  // with its own buffer, or accumulating into one would change the other.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  Tensor c = Tensor::from_vector({10, 20}, {2}, DType::f64);
  Tensor y = sum(mul(add(a, b), c));
  y.backward({}, true);
  EXPECT_NE(a.grad().storage().data(), b.grad().storage().data());
  sum(mul(a, 1.0)).backward();  // touches a.grad only
  EXPECT_EQ(grad_of(a), (V{11, 21}));
  EXPECT_EQ(grad_of(b), (V{10, 20}));
  y.backward();
  EXPECT_EQ(grad_of(a), (V{21, 41}));
  EXPECT_EQ(grad_of(b), (V{20, 40}));

  // A gradient the caller passes in is never adopted as .grad either.
  Tensor x = leaf({1, 2, 3});
  Tensor g = Tensor::from_vector({1, 1, 1}, {3}, DType::f64);
  Tensor z = add(x, 1.0);  // its backward passes the gradient through untouched
  z.backward(g, true);
  z.backward(g);
  EXPECT_EQ(grad_of(x), (V{2, 2, 2}));
  EXPECT_EQ(g.to_vector<double>(), (V{1, 1, 1}));
}

TEST(AutogradTest, MisuseThrows) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 2.0);
  std::string message = message_of<ValueError>([&] { y.requires_grad_(); });
  EXPECT_TRUE(contains(message, "leaf")) << message;
  EXPECT_THROW(Tensor::zeros({2}, DType::i64).requires_grad_(), DTypeError);
  Tensor plain = Tensor::zeros({2});
  plain.requires_grad_(false);  // allowed: a leaf
  EXPECT_FALSE(plain.requires_grad());

  message = message_of<ShapeError>([&] { y.backward(); });
  EXPECT_TRUE(contains(message, "[2]")) << message;
  EXPECT_THROW(y.backward(Tensor::ones({3}, DType::f64)), ShapeError);
  y.backward(Tensor::from_vector({1, 10}, {2}, DType::f64));  // an explicit gradient is fine
  EXPECT_EQ(grad_of(x), (V{2, 20}));

  message = message_of<Error>([&] { Tensor::ones({1}).backward(); });
  EXPECT_TRUE(contains(message, "does not require grad")) << message;
  Tensor s = leaf({4});
  s.backward();  // a one-element leaf is its own root
  EXPECT_EQ(grad_of(s), (V{1}));
}

TEST(AutogradTest, ActivationsAndReductionsGiveExactGradients) {
  Tensor x = leaf({-1, 0.5, 2, -3});
  sum(relu(x)).backward();
  EXPECT_EQ(grad_of(x), (V{0, 1, 1, 0}));
  Tensor m = Tensor::from_vector({1, 5, 5, 2, 0, 3}, {2, 3}, DType::f64);
  m.requires_grad_();
  sum(max(m, 1)).backward();  // ties: the first maximum gets the gradient
  EXPECT_EQ(grad_of(m), (V{0, 1, 0, 0, 0, 1}));
  Tensor n = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  n.requires_grad_();
  sum(mean(n, {1})).backward();
  for (double g : grad_of(n)) EXPECT_DOUBLE_EQ(g, 1.0 / 3);
}

}  // namespace
}  // namespace weft
