// The elementwise fast paths against cpu::reference for every op, dtype and memory layout the
// strided loop distinguishes: contiguous, transposed, sliced with a step, broadcast by shape
// (row, column, scalar) or by a stride-0 view, at odd small sizes and at sizes large enough to be
// split across threads.
#include "expect_error.h"
#include "weft/kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include "thread_count.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "weft/core/random.h"
#include "weft/core/threads.h"

namespace weft::cpu {
namespace {

using V = std::vector<double>;

struct Tolerance { double rtol, atol; };

// f32 and below compute in f32; bf16 / f16 round once on store, so they may land one unit in
// the last place away from the f64 reference (2^-7 relative for bf16, 2^-10 for f16). The atol
// covers cancellation in the f32 formulas (gelu's 1 + tanh(..) for x << 0).
Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-14};
    case DType::f32: return {1e-5, 1e-6};
    case DType::bf16: return {0x1p-7, 1e-5};
    default: return {0x1p-10, 1e-5};
  }
}

constexpr DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

constexpr Unary kUnary[] = {Unary::neg,  Unary::exp,       Unary::log,      Unary::sqrt,
                            Unary::abs,  Unary::relu,      Unary::gelu_tanh, Unary::gelu_erf,
                            Unary::sigmoid, Unary::tanh,   Unary::square};
constexpr Binary kBinary[] = {Binary::add, Binary::sub, Binary::mul, Binary::div, Binary::pow,
                              Binary::maximum, Binary::minimum, Binary::relu_backward,
                              Binary::gelu_tanh_backward, Binary::gelu_erf_backward,
                              Binary::sigmoid_backward, Binary::tanh_backward,
                              Binary::eq, Binary::gt, Binary::lt};

// Values each op is meaningful on (in its domain, with ties where ties matter), as f64.
Tensor values_for(const std::string& kind, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::function<double()> draw = [&] { return 1.5 * gen.normal(); };
  if (kind == "positive") draw = [&] { return 0.05 + 3 * gen.uniform(); };  // log, sqrt, pow's base, divisors
  if (kind == "ties") draw = [&] { return std::round(2 * gen.normal()) / 2; };  // comparisons: many equal pairs
  if (kind == "unit") draw = [&] { return gen.uniform(); };                 // sigmoid output
  if (kind == "signed_unit") draw = [&] { return 2 * gen.uniform() - 1; };  // tanh output
  std::vector<double> v(numel(shape));
  for (double& x : v) x = draw();
  return Tensor::from_vector(v, shape, DType::f64);
}

std::string unary_input(Unary op) { return op == Unary::log || op == Unary::sqrt ? "positive" : "normal"; }
std::pair<std::string, std::string> binary_inputs(Binary op) {
  switch (op) {
    case Binary::div: return {"normal", "positive"};
    case Binary::pow: return {"positive", "normal"};
    case Binary::maximum: case Binary::minimum: case Binary::eq: case Binary::gt: case Binary::lt:
      return {"ties", "ties"};
    case Binary::sigmoid_backward: return {"normal", "unit"};
    case Binary::tanh_backward: return {"normal", "signed_unit"};
    default: return {"normal", "normal"};
  }
}

// The same logical values in a chosen memory layout. Spare elements of the underlying storage
// hold NaN, so a loop that reads the wrong element shows it.
enum class Layout { contiguous, transposed, stepped, expanded };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::stepped: return "stepped";
    default: return "expanded";
  }
}

Tensor in_layout(const Tensor& values, DType dtype, Layout layout) {
  const Shape& shape = values.shape();
  int64_t nd = values.dim();
  if (layout == Layout::contiguous || nd == 0) return values.to(dtype).contiguous();
  if (layout == Layout::transposed) {  // reverse the dims: memory is column-major
    std::vector<int64_t> reverse;
    Shape reversed;
    for (int64_t d = nd - 1; d >= 0; --d) reverse.push_back(d), reversed.push_back(shape[d]);
    Tensor base = Tensor::full(reversed, NAN, dtype);
    Tensor view = base.permute(reverse);
    view.copy_(values);
    return view;
  }
  if (layout == Layout::stepped) {  // every dim taken with step 2 from offset 1
    Shape big;
    for (int64_t s : shape) big.push_back(2 * s + 1);
    Tensor view = Tensor::full(big, NAN, dtype);
    for (int64_t d = 0; d < nd; ++d) view = view.slice(d, 1, 2 * shape[d] + 1, 2);
    view.copy_(values);
    return view;
  }
  // expanded: the first dim broadcast from size 1, stride 0 (values must agree along it)
  Tensor row = values.narrow(0, 0, 1).to(dtype).contiguous();
  return row.expand(shape);
}

// Elementwise comparison with NaN == NaN and equal infinities.
void expect_close(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  V g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
              std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]);
    if (!ok && ++bad <= 3) ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i];
  }
  ASSERT_EQ(bad, 0) << what;
}

// Results keep the memory order of a dense permuted input (a transposed matrix, say) and are
// row-major otherwise.
void expect_result_layout(const Tensor& result, const Tensor& like, bool keeps_layout, const std::string& what) {
  if (keeps_layout && !like.is_contiguous()) EXPECT_EQ(result.strides(), like.strides()) << what;
  else EXPECT_TRUE(result.is_contiguous()) << what << " strides " << shape_str(result.strides());
}

// Runs a body with a fixed thread count so the parallel split is exercised on any machine.
using testing::ThreadCount;

const Shape kSmallShapes[] = {{3, 5}, {1, 7}, {7, 1}, {13, 17}};

TEST(ElementwiseTest, UnaryMatchesReferenceForEveryDTypeAndLayout) {
  for (Unary op : kUnary)
    for (const Shape& shape : kSmallShapes)
      for (DType dtype : kFloating)
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::stepped, Layout::expanded}) {
          Tensor x = in_layout(values_for(unary_input(op), shape, 11), dtype, layout);
          Tensor fast = unary(op, x);
          std::string what = std::string(unary_name(op)) + " " + dtype_name(dtype) + " " + shape_str(shape) +
                             " " + layout_name(layout);
          expect_result_layout(fast, x, layout == Layout::transposed, what);
          expect_close(fast, reference::unary(op, x), tolerance_for(dtype), what);
        }
}

TEST(ElementwiseTest, UnaryOnZeroDAndEmptyTensors) {
  for (DType dtype : kFloating) {
    Tensor s = Tensor::scalar(-0.75, dtype);
    EXPECT_EQ(unary(Unary::abs, s).shape(), Shape{});
    EXPECT_EQ(unary(Unary::abs, s).item(), 0.75);
    EXPECT_EQ(unary(Unary::square, Tensor::zeros({0, 3}, dtype)).shape(), (Shape{0, 3}));
  }
}

// Operand pairs covering each inner-loop case: both unit stride, one operand broadcast (inner
// stride 0, from a smaller shape or a stride-0 view), general strides, leading-dim broadcast.
struct BinaryCase {
  const char* name;
  Shape a_shape, b_shape;
  Layout a_layout, b_layout;
};

std::vector<BinaryCase> binary_cases(int64_t m, int64_t n) {
  return {
      {"contiguous", {m, n}, {m, n}, Layout::contiguous, Layout::contiguous},
      {"a transposed", {m, n}, {m, n}, Layout::transposed, Layout::contiguous},
      {"b transposed", {m, n}, {m, n}, Layout::contiguous, Layout::transposed},
      {"both transposed", {m, n}, {m, n}, Layout::transposed, Layout::transposed},
      {"stepped x transposed", {m, n}, {m, n}, Layout::stepped, Layout::transposed},
      {"row [n]", {m, n}, {n}, Layout::contiguous, Layout::contiguous},
      {"row [1, n], a transposed", {m, n}, {1, n}, Layout::transposed, Layout::contiguous},
      {"column [m, 1]", {m, n}, {m, 1}, Layout::contiguous, Layout::contiguous},
      {"column x row", {m, 1}, {1, n}, Layout::contiguous, Layout::contiguous},
      {"b scalar", {m, n}, {}, Layout::stepped, Layout::contiguous},
      {"a scalar", {}, {m, n}, Layout::contiguous, Layout::contiguous},
      {"b expanded view", {m, n}, {m, n}, Layout::contiguous, Layout::expanded},
      {"leading dim [2, m, n] x [m, n]", {2, m, n}, {m, n}, Layout::transposed, Layout::stepped},
  };
}

TEST(ElementwiseTest, BinaryMatchesReferenceForEveryDTypeAndLayout) {
  for (Binary op : kBinary) {
    auto [a_kind, b_kind] = binary_inputs(op);
    for (const Shape& shape : {Shape{3, 5}, Shape{7, 1}})
      for (const BinaryCase& c : binary_cases(shape[0], shape[1]))
        for (DType dtype : kFloating) {
          Tensor a = in_layout(values_for(a_kind, c.a_shape, 21), dtype, c.a_layout);
          Tensor b = in_layout(values_for(b_kind, c.b_shape, 22), dtype, c.b_layout);
          Tensor fast = binary(op, a, b);
          std::string what = std::string(binary_name(op)) + " " + dtype_name(dtype) + " " + c.name + " " +
                             shape_str(shape);
          bool same_layout = a.shape() == b.shape() && a.strides() == b.strides();
          expect_result_layout(fast, a, same_layout, what);
          expect_close(fast, reference::binary(op, a, b), tolerance_for(dtype), what);
        }
  }
}

TEST(ElementwiseTest, KnownValues) {
  Tensor x = Tensor::from_vector({-2, -0.5, 0, 1, 4}, {5}, DType::f32);
  EXPECT_EQ(unary(Unary::relu, x).to_vector<double>(), (V{0, 0, 0, 1, 4}));
  EXPECT_EQ(unary(Unary::abs, x).to_vector<double>(), (V{2, 0.5, 0, 1, 4}));
  EXPECT_EQ(unary(Unary::square, x).to_vector<double>(), (V{4, 0.25, 0, 1, 16}));
  EXPECT_EQ(unary(Unary::sqrt, unary(Unary::square, x)).to_vector<double>(), (V{2, 0.5, 0, 1, 4}));
  EXPECT_FLOAT_EQ(unary(Unary::sigmoid, x).at({2}), 0.5f);
  EXPECT_FLOAT_EQ(unary(Unary::gelu_erf, x).at({3}), 0.8413447f);  // 1 * Phi(1)
  EXPECT_FLOAT_EQ(unary(Unary::gelu_tanh, x).at({3}), 0.8411920f);
  Tensor y = Tensor::from_vector({1, -0.5, 0, 3, 4}, {5}, DType::f32);
  EXPECT_EQ(binary(Binary::maximum, x, y).to_vector<double>(), (V{1, -0.5, 0, 3, 4}));
  EXPECT_EQ(binary(Binary::minimum, x, y).to_vector<double>(), (V{-2, -0.5, 0, 1, 4}));
  EXPECT_EQ(binary(Binary::eq, x, y).to_vector<double>(), (V{0, 1, 1, 0, 1}));
  EXPECT_EQ(binary(Binary::gt, x, y).to_vector<double>(), (V{0, 0, 0, 0, 0}));
  EXPECT_EQ(binary(Binary::lt, x, y).to_vector<double>(), (V{1, 0, 0, 1, 0}));
  EXPECT_EQ(binary(Binary::relu_backward, y, x).to_vector<double>(), (V{0, 0, 0, 3, 4}));
  EXPECT_EQ(binary(Binary::pow, x, 2.0).to_vector<double>(), (V{4, 0.25, 0, 1, 16}));
  EXPECT_EQ(binary(Binary::sub, x, 1.0).to_vector<double>(), (V{-3, -1.5, -1, 0, 3}));
  Tensor nan = Tensor::from_vector({NAN, 1}, {2}, DType::f32);
  Tensor one = Tensor::from_vector({1, NAN}, {2}, DType::f32);
  V mx = binary(Binary::maximum, nan, one).to_vector<double>();  // a NaN operand wins, either side
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
}

// Just past the parallel grain (33153 elements), so the loops are split across threads; a 3-d
// stepped layout makes every thread start in the middle of a multi-dimensional index.
const Shape kLargeShape = {129, 257};

// Every op runs the same strided loop, so a few ops (vectorisable, libm, and a long formula)
// cover the split; the small-size tests cover each op's math.
TEST(ElementwiseTest, LargeUnarySplitAcrossThreadsMatchesReference) {
  ThreadCount threads(3);
  for (Unary op : {Unary::square, Unary::exp, Unary::gelu_tanh})
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::stepped, Layout::expanded}) {
      Tensor x = in_layout(values_for(unary_input(op), kLargeShape, 31), DType::f32, layout);
      expect_close(unary(op, x), reference::unary(op, x), tolerance_for(DType::f32),
                   std::string("large ") + unary_name(op) + " " + layout_name(layout));
    }
  for (DType dtype : {DType::bf16, DType::f16, DType::f64}) {
    Tensor x = in_layout(values_for("normal", kLargeShape, 32), dtype, Layout::transposed);
    expect_close(unary(Unary::gelu_erf, x), reference::unary(Unary::gelu_erf, x), tolerance_for(dtype),
                 std::string("large gelu_erf ") + dtype_name(dtype));
  }
  Tensor x3 = in_layout(values_for("normal", {3, 44, 257}, 33), DType::f32, Layout::stepped);
  expect_close(unary(Unary::tanh, x3), reference::unary(Unary::tanh, x3), tolerance_for(DType::f32),
               "large 3-d stepped tanh");
}

// reference::binary walks element by element (slow under the sanitizers), so at this size it
// checks one layout; the others must match the same kernel on contiguous copies run on one thread
// (whose agreement with the reference the small-size test establishes). Only FMA contraction may
// differ between the loops, hence a tolerance rather than bitwise equality.
TEST(ElementwiseTest, LargeBinarySplitAcrossThreadsMatchesReference) {
  ThreadCount threads(3);
  for (const BinaryCase& c : binary_cases(kLargeShape[0], kLargeShape[1])) {
    Tensor a = in_layout(values_for("normal", c.a_shape, 34), DType::f32, c.a_layout);
    Tensor b = in_layout(values_for("positive", c.b_shape, 35), DType::f32, c.b_layout);
    Binary op = c.a_shape.size() == 3 ? Binary::gelu_erf_backward : Binary::div;
    std::string what = std::string("large ") + binary_name(op) + " " + c.name;
    Tensor fast = binary(op, a, b);
    Tensor serial;
    {
      ThreadCount one(1);
      serial = binary(op, a.contiguous(), b.contiguous());
    }
    expect_close(fast, serial, {1e-6, 1e-7}, what + " vs contiguous on one thread");
    if (std::string(c.name) == "stepped x transposed")
      expect_close(fast, reference::binary(op, a, b), tolerance_for(DType::f32), what);
  }
}

TEST(ElementwiseTest, InPlaceAndAxpyMatchReference) {
  for (DType dtype : kFloating)
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::stepped}) {
      Tensor a = in_layout(values_for("normal", {7, 9}, 41), dtype, layout);
      Tensor b = in_layout(values_for("normal", {9}, 42), dtype, Layout::contiguous);
      Tensor want = reference::binary(Binary::mul, a, b);
      Shape strides_before = a.strides();
      void* data_before = a.data_ptr();
      binary_(Binary::mul, a, b);
      EXPECT_EQ(a.strides(), strides_before);  // written in place, layout kept
      EXPECT_EQ(a.data_ptr(), data_before);
      expect_close(a, want, tolerance_for(dtype), std::string("mul_ ") + dtype_name(dtype) + " " + layout_name(layout));

      Tensor c = in_layout(values_for("normal", {7, 9}, 43), dtype, Layout::transposed);
      Tensor scaled = reference::binary(Binary::mul, c, Tensor::scalar(-0.5, dtype));
      Tensor expected = reference::binary(Binary::add, a, scaled);
      axpy_(a, -0.5, c);
      Tolerance tol = tolerance_for(dtype);
      tol.atol = std::max(tol.atol, 2 * tol.rtol);  // two roundings of O(1) values for 16-bit types
      expect_close(a, expected, tol, std::string("axpy_ ") + dtype_name(dtype) + " " + layout_name(layout));
    }
  Tensor a = Tensor::zeros({3});
  EXPECT_THROW(binary_(Binary::add, a, Tensor::zeros({2, 3})), ShapeError);
  EXPECT_THROW(axpy_(a, 1.0, Tensor::zeros({1})), ShapeError);
  EXPECT_THROW(axpy_(a, 1.0, Tensor::zeros({3}, DType::f64)), DTypeError);
}

using weft::testing::message_of;
using weft::testing::contains;

TEST(ElementwiseTest, ErrorsNameWhatWasWrong) {
  Tensor f32 = Tensor::zeros({2, 3}), f64 = Tensor::zeros({2, 3}, DType::f64);
  std::string message = message_of<DTypeError>([&] { binary(Binary::add, f32, f64); });
  EXPECT_TRUE(contains(message, "f32") && contains(message, "f64")) << message;
  EXPECT_TRUE(contains(message, "add")) << message;

  message = message_of<ShapeError>([&] { binary(Binary::mul, f32, Tensor::zeros({4})); });
  EXPECT_TRUE(contains(message, "[2, 3]") && contains(message, "[4]")) << message;
  EXPECT_TRUE(contains(message, "mul")) << message;
  EXPECT_THROW(reference::binary(Binary::mul, f32, Tensor::zeros({4})), ShapeError);

  message = message_of<DTypeError>([&] { unary(Unary::exp, Tensor::zeros({2}, DType::i64)); });
  EXPECT_TRUE(contains(message, "i64")) << message;
  EXPECT_TRUE(contains(message, "exp")) << message;
  EXPECT_THROW(binary(Binary::add, Tensor::zeros({2}, DType::i32), Tensor::zeros({2}, DType::i32)), DTypeError);
  EXPECT_THROW(binary(Binary::add, Tensor::zeros({2}, DType::u8), 1.0), DTypeError);
  EXPECT_THROW(binary(Binary::add, f32, Tensor::zeros({2, 3}, DType::boolean)), DTypeError);
  EXPECT_THROW(unary(Unary::neg, Tensor()), ValueError);
}

TEST(ElementwiseTest, OpNames) {
  EXPECT_STREQ(unary_name(Unary::gelu_erf), "gelu_erf");
  EXPECT_STREQ(unary_name(Unary::square), "square");
  EXPECT_STREQ(binary_name(Binary::tanh_backward), "tanh_backward");
  EXPECT_STREQ(binary_name(Binary::lt), "lt");
  EXPECT_STREQ(binary_name(Binary::pow), "pow");
}

}  // namespace
}  // namespace weft::cpu
