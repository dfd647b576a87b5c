#include "weft/ops/arith.h"

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using kernels::Binary;
using kernels::KernelTable;
using kernels::Unary;
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

// Gradients of broadcast operands are summed back to each operand's shape. The op table counts one
// FLOP per output element for every op here (exp, log, sqrt and pow included).
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope(Op::add, {a, b});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary(Binary::add, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, b, out});
  record(op_name(Op::add), {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    return Grads{k.sum_to(g[0], sa), k.sum_to(g[0], sb)};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope(Op::sub, {a, b});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary(Binary::sub, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, b, out});
  record(op_name(Op::sub), {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    return Grads{k.sum_to(g[0], sa), k.sum_to(k.unary(Unary::neg, g[0]), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope(Op::mul, {a, b});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary(Binary::mul, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, b, out});
  record(op_name(Op::mul), {a, b}, {out}, [a, b](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    return Grads{a.requires_grad() ? k.sum_to(k.binary(Binary::mul, g[0], b), a.shape()) : Tensor(),
                 b.requires_grad() ? k.sum_to(k.binary(Binary::mul, g[0], a), b.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  promote(a, b);
  monitor::OpScope scope(Op::div, {a, b});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary(Binary::div, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, b, out});
  record(op_name(Op::div), {a, b}, {out}, [a, b, y = out.detach()](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    Tensor ga = k.binary(Binary::div, g[0], b);  // d(a/b)/da = 1/b
    Tensor gb;
    if (b.requires_grad())  // d(a/b)/db = -(a/b)/b
      gb = k.sum_to(k.unary(Unary::neg, k.binary(Binary::mul, ga, y)), b.shape());
    return Grads{a.requires_grad() ? k.sum_to(ga, a.shape()) : Tensor(), gb};
  });
  return out;
}

Tensor add(const Tensor& a, double b) {
  monitor::OpScope scope(Op::add_scalar, {a});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary_scalar(Binary::add, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, out});
  record(op_name(Op::add_scalar), {a}, {out}, [](const Grads& g) { return Grads{g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  monitor::OpScope scope(Op::mul_scalar, {a});
  const KernelTable& k = kernels::of(a);
  Tensor out = k.binary_scalar(Binary::mul, a, b);
  if (scope.active()) scope.set_cost_per_element(out, {a, out});
  record(op_name(Op::mul_scalar), {a}, {out}, [b](const Grads& g) {
    return Grads{kernels::of(g[0]).binary_scalar(Binary::mul, g[0], b)};
  });
  return out;
}

Tensor neg(const Tensor& x) {
  monitor::OpScope scope(Op::neg, {x});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.unary(Unary::neg, x);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  record(op_name(Op::neg), {x}, {out}, [](const Grads& g) { return Grads{kernels::of(g[0]).unary(Unary::neg, g[0])}; });
  return out;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast(Op::exp, x_in);
  monitor::OpScope scope(Op::exp, {x});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.unary(Unary::exp, x);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  record(op_name(Op::exp), {x}, {out}, [y = out.detach()](const Grads& g) {
    return Grads{kernels::of(g[0]).binary(Binary::mul, g[0], y)};
  });
  return out;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast(Op::log, x_in);
  monitor::OpScope scope(Op::log, {x});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.unary(Unary::log, x);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  record(op_name(Op::log), {x}, {out}, [x](const Grads& g) {
    return Grads{kernels::of(g[0]).binary(Binary::div, g[0], x)};
  });
  return out;
}

Tensor sqrt(const Tensor& x_in) {
  const Tensor x = autocast(Op::sqrt, x_in);
  monitor::OpScope scope(Op::sqrt, {x});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.unary(Unary::sqrt, x);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  record(op_name(Op::sqrt), {x}, {out}, [y = out.detach()](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    return Grads{k.binary(Binary::div, k.binary_scalar(Binary::mul, g[0], 0.5), y)};
  });
  return out;
}

Tensor pow(const Tensor& x_in, double exponent) {
  const Tensor x = autocast(Op::pow, x_in);
  monitor::OpScope scope(Op::pow, {x});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.binary_scalar(Binary::pow, x, exponent);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  record(op_name(Op::pow), {x}, {out}, [x, exponent](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    const Tensor power = k.binary_scalar(Binary::pow, x, exponent - 1);
    return Grads{k.binary_scalar(Binary::mul, k.binary(Binary::mul, g[0], power), exponent)};
  });
  return out;
}

Tensor pow(const Tensor& x_in, const Tensor& exponent_in) {
  const Tensor x = autocast(Op::pow, x_in), exponent = autocast(Op::pow, exponent_in);
  monitor::OpScope scope(Op::pow, {x, exponent});
  const KernelTable& k = kernels::of(x);
  Tensor out = k.binary(Binary::pow, x, exponent);
  if (scope.active()) scope.set_cost_per_element(out, {x, exponent, out});
  record(op_name(Op::pow), {x, exponent}, {out}, [x, exponent, y = out.detach()](const Grads& g) {
    const KernelTable& k = kernels::of(g[0]);
    Tensor gx, ge;
    if (x.requires_grad()) {  // e * x^(e-1)
      const Tensor power = k.binary(Binary::pow, x, k.binary_scalar(Binary::sub, exponent, 1.0));
      gx = k.sum_to(k.binary(Binary::mul, g[0], k.binary(Binary::mul, exponent, power)), x.shape());
    }
    if (exponent.requires_grad())  // x^e * ln x
      ge = k.sum_to(k.binary(Binary::mul, g[0], k.binary(Binary::mul, y, k.unary(Unary::log, x))), exponent.shape());
    return Grads{gx, ge};
  });
  return out;
}

}  // namespace weft
