#include "weft/ops/arith.h"

#include "weft/autograd/node.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/kernels/cpu/reduce.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using cpu::Binary;
using cpu::Unary;
using Grads = std::vector<Tensor>;

// Binary arithmetic on two floating dtypes runs in the wider one (bf16 with f16 meet in f32), as
// PyTorch's type promotion does; the cast is a recorded `to`, so each operand's gradient comes
// back in its own dtype.
static void promote(Tensor& a, Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype() || !is_floating(a.dtype()) || !is_floating(b.dtype()))
    return;
  size_t wa = dtype_size(a.dtype()), wb = dtype_size(b.dtype());
  DType wider = wa > wb ? a.dtype() : wb > wa ? b.dtype() : DType::f32;
  a = a.to(wider);
  b = b.to(wider);
}

// Gradients of broadcast operands are summed back to each operand's shape. The profiler counts one
// FLOP per output element for every op here (exp, log, sqrt and pow included).
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope("add", {a, b});
  Tensor out = cpu::binary(Binary::add, a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, b, out}));
  record("add", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
    return Grads{cpu::sum_to(g[0], sa), cpu::sum_to(g[0], sb)};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope("sub", {a, b});
  Tensor out = cpu::binary(Binary::sub, a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, b, out}));
  record("sub", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
    return Grads{cpu::sum_to(g[0], sa), cpu::sum_to(cpu::unary(Unary::neg, g[0]), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope("mul", {a, b});
  Tensor out = cpu::binary(Binary::mul, a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, b, out}));
  record("mul", {a, b}, {out}, [a, b](const Grads& g) {
    return Grads{a.requires_grad() ? cpu::sum_to(cpu::mul(g[0], b), a.shape()) : Tensor(),
                 b.requires_grad() ? cpu::sum_to(cpu::mul(g[0], a), b.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope("div", {a, b});
  Tensor out = cpu::binary(Binary::div, a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, b, out}));
  record("div", {a, b}, {out}, [a, b, y = out.detach()](const Grads& g) {
    Tensor ga = cpu::binary(Binary::div, g[0], b);  // d(a/b)/da = 1/b
    Tensor gb;
    if (b.requires_grad())  // d(a/b)/db = -(a/b)/b
      gb = cpu::sum_to(cpu::unary(Unary::neg, cpu::mul(ga, y)), b.shape());
    return Grads{a.requires_grad() ? cpu::sum_to(ga, a.shape()) : Tensor(), gb};
  });
  return out;
}

Tensor add(const Tensor& a, double b) {
  monitor::OpScope scope("add_scalar", {a});
  Tensor out = cpu::binary(Binary::add, a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, out}));
  record("add_scalar", {a}, {out}, [](const Grads& g) { return Grads{g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  monitor::OpScope scope("mul_scalar", {a});
  Tensor out = cpu::mul(a, b);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({a, out}));
  record("mul_scalar", {a}, {out}, [b](const Grads& g) { return Grads{cpu::mul(g[0], b)}; });
  return out;
}

Tensor neg(const Tensor& x) {
  monitor::OpScope scope("neg", {x});
  Tensor out = cpu::unary(Unary::neg, x);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));
  record("neg", {x}, {out}, [](const Grads& g) { return Grads{cpu::unary(Unary::neg, g[0])}; });
  return out;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast("exp", x_in);
  monitor::OpScope scope("exp", {x});
  Tensor out = cpu::unary(Unary::exp, x);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));
  record("exp", {x}, {out}, [y = out.detach()](const Grads& g) { return Grads{cpu::mul(g[0], y)}; });
  return out;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast("log", x_in);
  monitor::OpScope scope("log", {x});
  Tensor out = cpu::unary(Unary::log, x);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));
  record("log", {x}, {out}, [x](const Grads& g) { return Grads{cpu::binary(Binary::div, g[0], x)}; });
  return out;
}

Tensor sqrt(const Tensor& x_in) {
  const Tensor x = autocast("sqrt", x_in);
  monitor::OpScope scope("sqrt", {x});
  Tensor out = cpu::unary(Unary::sqrt, x);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));
  record("sqrt", {x}, {out}, [y = out.detach()](const Grads& g) {
    return Grads{cpu::binary(Binary::div, cpu::mul(g[0], 0.5), y)};
  });
  return out;
}

Tensor pow(const Tensor& x_in, double exponent) {
  const Tensor x = autocast("pow", x_in);
  monitor::OpScope scope("pow", {x});
  Tensor out = cpu::binary(Binary::pow, x, exponent);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));
  record("pow", {x}, {out}, [x, exponent](const Grads& g) {
    return Grads{cpu::mul(cpu::mul(g[0], cpu::binary(Binary::pow, x, exponent - 1)), exponent)};
  });
  return out;
}

Tensor pow(const Tensor& x_in, const Tensor& exponent_in) {
  const Tensor x = autocast("pow", x_in), exponent = autocast("pow", exponent_in);
  monitor::OpScope scope("pow", {x, exponent});
  Tensor out = cpu::binary(Binary::pow, x, exponent);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, exponent, out}));
  record("pow", {x, exponent}, {out}, [x, exponent, y = out.detach()](const Grads& g) {
    Tensor gx, ge;
    if (x.requires_grad())  // e * x^(e-1)
      gx = cpu::sum_to(cpu::mul(g[0], cpu::mul(exponent, cpu::binary(Binary::pow, x, cpu::binary(Binary::sub, exponent, 1.0)))), x.shape());
    if (exponent.requires_grad())  // x^e * ln x
      ge = cpu::sum_to(cpu::mul(g[0], cpu::mul(y, cpu::unary(Unary::log, x))), exponent.shape());
    return Grads{gx, ge};
  });
  return out;
}

}  // namespace weft
