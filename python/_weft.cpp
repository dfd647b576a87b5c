// weft's Python module, _weft: its tensors, ops and autograd as PyTorch users write them. The
// package python/weft/ wraps it (import weft); docs/python.md is the user's page.
//
// NumPy arrays and weft tensors share memory both ways without a copy: weft.from_numpy borrows
// the array's buffer (the tensor keeps the array alive), and a tensor exports its own through
// Python's buffer protocol (np.asarray(t) keeps the tensor alive). bf16, which NumPy has no type
// for, is refused there with the conversion to ask for. weft's exceptions arrive as Python's:
// ShapeError and ValueError as ValueError, DTypeError as TypeError, IndexError as IndexError,
// OutOfMemoryError as MemoryError, the rest as RuntimeError, each with weft's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/amp/grad_scaler.h"
#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/error.h"
#include "weft/core/random.h"
#include "weft/core/tensor.h"
#include "weft/infer/load.h"
#include "weft/io/safetensors.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/attention.h"
#include "weft/ops/conv.h"
#include "weft/ops/embedding.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/ops/norm.h"
#include "weft/ops/pool.h"
#include "weft/ops/reduce.h"
#include "weft/ops/shape.h"
#include "weft/optim/adam.h"
#include "weft/optim/clip.h"
#include "weft/optim/schedule.h"
#include "weft/optim/sgd.h"

namespace py = pybind11;
using namespace weft;

void add_train(py::module_& m);   // weft.train (python/train.cpp)
void add_dlpack(py::module_& m);  // __dlpack__ and weft.from_dlpack (python/dlpack.cpp)

namespace {

// NumPy's type of each dtype, as (kind, item size); bf16 has none.
struct NumpyType {
  DType dtype;
  char kind;
  size_t itemsize;
  const char* format;  // the buffer protocol's
};
constexpr NumpyType kNumpyTypes[] = {
    {DType::f64, 'f', 8, "d"}, {DType::f32, 'f', 4, "f"}, {DType::f16, 'f', 2, "e"}, {DType::i64, 'i', 8, "q"},
    {DType::i32, 'i', 4, "i"}, {DType::i8, 'i', 1, "b"},  {DType::u8, 'u', 1, "B"},  {DType::boolean, 'b', 1, "?"},
};

const NumpyType& numpy_type(DType dtype) {
  for (const NumpyType& t : kNumpyTypes)
    if (t.dtype == dtype) return t;
  throw DTypeError(str("NumPy has no ", dtype_name(dtype), " type: convert first, t.to(weft.f32).numpy()"));
}

DType dtype_of(const py::dtype& dt) {
  for (const NumpyType& t : kNumpyTypes)
    if (t.kind == dt.kind() && t.itemsize == static_cast<size_t>(dt.itemsize())) return t.dtype;
  throw DTypeError(weft::str("weft has no dtype for NumPy's ", dt.attr("name").cast<std::string>()));
}

void check_on_host(const Tensor& t, const char* what) {
  WEFT_CHECK(t.device().is_cpu(), DeviceError, what, ": the tensor is on ", t.device().name(),
             "; move it with t.to('cpu') first");
}

// The array's memory as a tensor, the array kept alive by it. Element strides must be whole and
// not negative (weft's views are); other arrays are copied first.
Tensor from_numpy(py::array array) {
  const DType dtype = dtype_of(array.dtype());
  const auto itemsize = static_cast<int64_t>(array.itemsize());
  Shape shape(array.ndim()), strides(array.ndim());
  bool viewable = true;
  int64_t span = array.size() > 0 ? 1 : 0;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    shape[d] = array.shape(d);
    viewable = viewable && array.strides(d) >= 0 && array.strides(d) % itemsize == 0;
    strides[d] = array.strides(d) / itemsize;
    if (array.size() > 0) span += (shape[d] - 1) * strides[d];
  }
  if (!viewable) array = py::array::ensure(array, py::array::c_style | py::array::forcecast);
  if (!viewable) return from_numpy(array);
  // The deleter may run on any thread (a DataLoader's, the autograd engine's): it takes the GIL.
  auto* held = new py::object(array);
  std::shared_ptr<void> owner(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(array.mutable_data(), static_cast<size_t>(span * itemsize), owner);
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// A copy of any array-like (nested lists, scalars, arrays) as a tensor of its own memory.
Tensor tensor_from(const py::object& data, std::optional<DType> dtype, bool requires_grad) {
  const py::module_ numpy = py::module_::import("numpy");
  py::array array = py::array::ensure(numpy.attr("asarray")(data), py::array::c_style);
  Tensor t = from_numpy(array).clone();
  // Python's floats become f32, PyTorch's default; an array's f64 stays f64.
  if (!dtype && t.dtype() == DType::f64 && !py::isinstance(data, numpy.attr("ndarray"))) dtype = DType::f32;
  if (dtype && *dtype != t.dtype()) t = t.to(*dtype);
  if (requires_grad) t.requires_grad_();
  return t;
}

py::buffer_info buffer_of(const Tensor& t) {
  check_on_host(t, "buffer");
  const NumpyType& type = numpy_type(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * static_cast<py::ssize_t>(type.itemsize));
  return py::buffer_info(t.data_ptr(), static_cast<py::ssize_t>(type.itemsize), type.format,
                         static_cast<py::ssize_t>(shape.size()), shape, strides);
}

py::array numpy_of(const Tensor& t) {
  check_on_host(t, "numpy");
  return py::array(py::buffer(py::cast(t)));
}

Device device_of(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda" || name == "cuda:0") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0) return Device::cuda(std::stoi(name.substr(5)));
  throw ValueError(str("unknown device '", name, "': expected 'cpu', 'cuda' or 'cuda:N'"));
}

// Python's indexing (ints, slices, a tuple of them; Ellipsis and None too) as views.
Tensor index_tensor(const Tensor& t, const py::object& key) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(key))
    for (py::handle h : key.cast<py::tuple>()) items.push_back(py::reinterpret_borrow<py::object>(h));
  else
    items.push_back(key);
  int64_t consumed = 0;
  for (const py::object& item : items) consumed += !item.is_none() && !py::isinstance<py::ellipsis>(item);
  WEFT_CHECK(consumed <= t.dim(), IndexError, "too many indices for a tensor of ", t.dim(), " dimension",
             t.dim() == 1 ? "" : "s", ": ", consumed);
  Tensor out = t;
  int64_t dim = 0;
  for (const py::object& item : items) {
    if (py::isinstance<py::ellipsis>(item)) {
      dim += t.dim() - consumed;
    } else if (item.is_none()) {
      out = out.unsqueeze(dim++);
    } else if (py::isinstance<py::slice>(item)) {
      py::ssize_t start, stop, step, length;
      WEFT_CHECK(item.cast<py::slice>().compute(out.size(dim), &start, &stop, &step, &length), IndexError,
                 "invalid slice");
      WEFT_CHECK(step > 0, ValueError, "slices with a negative step are not supported; use flip");
      out = out.slice(dim++, start, start + length * step, step);
    } else if (py::isinstance<py::int_>(item)) {
      out = out.select(dim, item.cast<int64_t>());
    } else {
      throw IndexError(str("only integers, slices, None and ... index a tensor, got ",
                           std::string(py::str(py::type::of(item).attr("__name__")))));
    }
  }
  return out;
}

// PyTorch's int-or-pair arguments (stride=2, padding=(1, 0)).
std::array<int64_t, 2> pair_of(const py::object& value) {
  if (py::isinstance<py::int_>(value)) return {value.cast<int64_t>(), value.cast<int64_t>()};
  const auto v = value.cast<std::vector<int64_t>>();
  WEFT_CHECK(v.size() == 2, ValueError, "expected an int or a pair of ints, got ", v.size(), " values");
  return {v[0], v[1]};
}

Pool2dOptions pool_options(const py::object& kernel, const py::object& stride, const py::object& padding) {
  return {.kernel = pair_of(kernel), .stride = stride.is_none() ? std::array<int64_t, 2>{0, 0} : pair_of(stride),
          .padding = pair_of(padding)};
}

Shape shape_from(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

}  // namespace

PYBIND11_MODULE(_weft, m) {
  m.doc() = "weft's tensors, ops and autograd (the package `weft` is the user's entry point)";

  // Registered most specific first: a handler is tried in the reverse order of registration.
  static py::exception<Error> weft_error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const DTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const Error& e) {
      weft_error(e.what());
    }
  });

  py::enum_<DType> dtype_type(m, "dtype");
  dtype_type
      .value("f64", DType::f64)
      .value("f32", DType::f32)
      .value("f16", DType::f16)
      .value("bf16", DType::bf16)
      .value("i64", DType::i64)
      .value("i32", DType::i32)
      .value("i8", DType::i8)
      .value("u8", DType::u8)
      .value("bool", DType::boolean)
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); });
  // Replacing enum_'s own (a def would add an overload behind them): weft.f32 prints as such.
  dtype_type.attr("__repr__") =
      py::cpp_function([](DType d) { return weft::str("weft.", dtype_name(d)); }, py::is_method(dtype_type));
  dtype_type.attr("__str__") =
      py::cpp_function([](DType d) { return std::string(dtype_name(d)); }, py::is_method(dtype_type));

  py::class_<Tensor>(m, "Tensor", py::buffer_protocol())
      .def_buffer(&buffer_of)
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def("size", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def("size", [](const Tensor& t, int64_t d) { return t.size(d); })
      .def("stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("__len__", [](const Tensor& t) {
        WEFT_CHECK(t.dim() > 0, ValueError, "len() of a 0-d tensor");
        return t.size(0);
      })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", [](const Tensor& t) { return t.device().name(); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("numpy", &numpy_of, "the tensor's memory as a NumPy array (no copy; the tensor stays alive with it)")
      .def("item", [](const Tensor& t) -> py::object {
        const double v = t.to(Device::cpu()).item();
        if (is_floating(t.dtype())) return py::float_(v);
        if (t.dtype() == DType::boolean) return py::bool_(v != 0);
        return py::int_(static_cast<int64_t>(v));
      })
      .def("tolist", [](const Tensor& t) {
        const Tensor host = t.to(Device::cpu());
        return numpy_of(host.dtype() == DType::bf16 ? host.to(DType::f32) : host.contiguous()).attr("tolist")();
      })
      .def("__repr__", &Tensor::to_string)
      // autograd
      .def_property(
          "requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def("requires_grad_", [](Tensor& t, bool on) { return t.requires_grad_(on); }, py::arg("requires_grad") = true)
      .def_property(
          "grad", [](const Tensor& t) -> py::object { return t.grad().defined() ? py::cast(t.grad()) : py::none(); },
          [](const Tensor& t, std::optional<Tensor> grad) { t.set_grad(grad.value_or(Tensor())); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def("backward",
           [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
             py::gil_scoped_release release;
             t.backward(gradient.value_or(Tensor()), retain_graph);
           },
           py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      .def("copy_", [](Tensor& t, const Tensor& src) -> Tensor& { return t.copy_(src); },
           "copies src's values in (broadcast, converted); not recorded by autograd")
      .def("zero_", [](Tensor& t) -> Tensor& { return t.zero_(); })
      // conversions and views
      .def("to", [](const Tensor& t, DType d) { return t.to(d); })
      .def("to", [](const Tensor& t, const std::string& device) { return t.to(device_of(device)); })
      .def("float", [](const Tensor& t) { return t.to(DType::f32); })
      .def("clone", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      .def("view", [](const Tensor& t, const py::args& shape) { return t.view(shape_from(shape)); })
      .def("reshape", [](const Tensor& t, const py::args& shape) { return t.reshape(shape_from(shape)); })
      .def("transpose", &Tensor::transpose)
      .def("permute", [](const Tensor& t, const py::args& dims) { return t.permute(shape_from(dims)); })
      .def_property_readonly("T", [](const Tensor& t) { return t.t(); })
      .def("t", &Tensor::t)
      .def("unsqueeze", &Tensor::unsqueeze)
      .def("squeeze", &Tensor::squeeze)
      .def("split", [](const Tensor& t, int64_t size, int64_t dim) { return split(t, size, dim); }, py::arg("split_size"),
           py::arg("dim") = 0, "views of `split_size` along `dim`, the last smaller when it does not divide")
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("expand", [](const Tensor& t, const py::args& shape) { return t.expand(shape_from(shape)); })
      .def("__getitem__", &index_tensor)
      // arithmetic, as Python's operators
      .def("__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); })
      .def("__add__", [](const Tensor& a, double b) { return add(a, b); })
      .def("__radd__", [](const Tensor& a, double b) { return add(a, b); })
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); })
      .def("__sub__", [](const Tensor& a, double b) { return add(a, -b); })
      .def("__rsub__", [](const Tensor& a, double b) { return add(neg(a), b); })
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); })
      .def("__mul__", [](const Tensor& a, double b) { return mul(a, b); })
      .def("__rmul__", [](const Tensor& a, double b) { return mul(a, b); })
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); })
      .def("__truediv__", [](const Tensor& a, double b) { return mul(a, 1.0 / b); })
      .def("__rtruediv__", [](const Tensor& a, double b) { return mul(pow(a, -1.0), b); })
      .def("__pow__", [](const Tensor& a, double b) { return pow(a, b); })
      .def("__pow__", [](const Tensor& a, const Tensor& b) { return pow(a, b); })
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); })
      .def("sum", [](const Tensor& t, std::optional<std::vector<int64_t>> dims, bool keepdim) {
             return sum(t, dims.value_or(std::vector<int64_t>{}), keepdim);
           }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("mean", [](const Tensor& t, std::optional<std::vector<int64_t>> dims, bool keepdim) {
             return mean(t, dims.value_or(std::vector<int64_t>{}), keepdim);
           }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("argmax", [](const Tensor& t, int64_t dim) { return argmax(t, dim); }, py::arg("dim"))
      .def("exp", [](const Tensor& t) { return exp(t); })
      .def("log", [](const Tensor& t) { return log(t); })
      .def("sqrt", [](const Tensor& t) { return sqrt(t); })
      .def("relu", [](const Tensor& t) { return relu(t); });

  m.def("from_numpy", &from_numpy, py::arg("array"),
        "a tensor sharing the array's memory (writes through either are seen by both)");
  m.def("tensor", &tensor_from, py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false,
        "a tensor holding a copy of `data` (a list, a scalar or an array)");
  m.def("empty", [](const py::args& shape, DType dtype) { return Tensor::empty(shape_from(shape), dtype); },
        py::arg("dtype") = DType::f32);
  m.def("zeros", [](const py::args& shape, DType dtype) { return Tensor::zeros(shape_from(shape), dtype); },
        py::arg("dtype") = DType::f32);
  m.def("ones", [](const py::args& shape, DType dtype) { return Tensor::ones(shape_from(shape), dtype); },
        py::arg("dtype") = DType::f32);
  m.def("full", [](const Shape& shape, double value, DType dtype) { return Tensor::full(shape, value, dtype); },
        py::arg("shape"), py::arg("value"), py::arg("dtype") = DType::f32);
  m.def("arange", [](int64_t n, DType dtype) { return Tensor::arange(n, dtype); }, py::arg("n"),
        py::arg("dtype") = DType::i64);
  m.def("randn", [](const py::args& shape, DType dtype) { return Tensor::randn(shape_from(shape), dtype); },
        py::arg("dtype") = DType::f32);
  m.def("rand", [](const py::args& shape, DType dtype) { return Tensor::rand(shape_from(shape), dtype); },
        py::arg("dtype") = DType::f32);
  m.def("manual_seed", &manual_seed, py::arg("seed"));

  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("set_grad_enabled", &set_grad_enabled, py::arg("enabled"));

  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  m.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) { return linear(x, w, b.value_or(Tensor())); },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("relu", [](const Tensor& x) { return relu(x); });
  m.def("gelu", [](const Tensor& x, const std::string& approximate) {
          WEFT_CHECK(approximate == "none" || approximate == "tanh", ValueError,
                     "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
          return gelu(x, approximate == "tanh" ? GeluApproximation::tanh : GeluApproximation::none);
        }, py::arg("input"), py::arg("approximate") = "none");
  m.def("sigmoid", [](const Tensor& x) { return sigmoid(x); });
  m.def("tanh", [](const Tensor& x) { return weft::tanh(x); });
  m.def("exp", [](const Tensor& x) { return exp(x); });
  m.def("log", [](const Tensor& x) { return log(x); });
  m.def("softmax", [](const Tensor& x, int64_t dim) { return softmax(x, dim); }, py::arg("input"), py::arg("dim"));
  m.def("log_softmax", [](const Tensor& x, int64_t dim) { return log_softmax(x, dim); }, py::arg("input"),
        py::arg("dim"));
  m.def("cross_entropy",
        [](const Tensor& logits, const Tensor& target, const std::string& reduction, int64_t ignore_index,
           double label_smoothing) {
          WEFT_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", ValueError,
                     "cross_entropy: reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
          const Reduction r = reduction == "mean" ? Reduction::mean : reduction == "sum" ? Reduction::sum : Reduction::none;
          return cross_entropy(logits, target, r, ignore_index, label_smoothing);
        },
        py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("ignore_index") = -100,
        py::arg("label_smoothing") = 0.0);
  m.def("conv2d",
        [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, const py::object& stride, const py::object& padding,
           const py::object& dilation, int64_t groups) {
          return conv2d(x, w, b.value_or(Tensor()),
                        {.stride = pair_of(stride), .padding = pair_of(padding), .dilation = pair_of(dilation), .groups = groups});
        },
        py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1);
  m.def("max_pool2d",
        [](const Tensor& x, const py::object& kernel, const py::object& stride, const py::object& padding) {
          return max_pool2d(x, pool_options(kernel, stride, padding));
        },
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  m.def("avg_pool2d",
        [](const Tensor& x, const py::object& kernel, const py::object& stride, const py::object& padding) {
          return avg_pool2d(x, pool_options(kernel, stride, padding));
        },
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  m.def("adaptive_avg_pool2d", [](const Tensor& x, const py::object& size) { return adaptive_avg_pool2d(x, pair_of(size)); },
        py::arg("input"), py::arg("output_size"));
  m.def("layer_norm",
        [](const Tensor& x, const Shape& shape, std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
          return layer_norm(x, shape, w.value_or(Tensor()), b.value_or(Tensor()), eps);
        },
        py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5);
  m.def("scaled_dot_product_attention",
        [](const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, std::optional<double> scale) {
          return scaled_dot_product_attention(q, k, v, is_causal, scale.value_or(0));
        },
        py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal") = false, py::arg("scale") = py::none(),
        "softmax(q k^T * scale) v, scale 1/sqrt(head dim) unless given; the fused kernel, which never builds the "
        "[Tq, Tk] scores");
  m.def("embedding", [](const Tensor& indices, const Tensor& weight) { return embedding(indices, weight); },
        py::arg("input"), py::arg("weight"));
  m.def("dropout", [](const Tensor& x, double p, bool training) { return dropout(x, p, training); }, py::arg("input"),
        py::arg("p") = 0.5, py::arg("training") = true);
  m.def("mse_loss", [](const Tensor& a, const Tensor& b) { return mse_loss(a, b); }, py::arg("input"), py::arg("target"));
  m.def("sum", [](const Tensor& t) { return sum(t); });
  m.def("mean", [](const Tensor& t) { return mean(t); });
  // weft.optim: the optimizers every weft train run uses, updating the tensors given in place.
  py::module_ optim = m.def_submodule("optim", "weft's optimizers: each updates its parameters in place");
  py::class_<optim::Optimizer>(optim, "Optimizer")
      .def("step", [](optim::Optimizer& o) {
        py::gil_scoped_release release;
        o.step();
      })
      .def("zero_grad", &optim::Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("params", &optim::Optimizer::params);
  py::class_<optim::SGD, optim::Optimizer>(optim, "SGD")
      .def(py::init([](std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
             return std::make_unique<optim::SGD>(std::move(params), lr,
                                                 optim::SGDOptions{.momentum = momentum, .dampening = dampening,
                                                                   .weight_decay = weight_decay, .nesterov = nesterov});
           }),
           py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  py::class_<optim::Adam, optim::Optimizer>(optim, "Adam")
      .def(py::init([](std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return std::make_unique<optim::Adam>(
                 std::move(params), optim::AdamOptions{.lr = lr, .beta1 = betas.first, .beta2 = betas.second, .eps = eps,
                                                       .weight_decay = weight_decay, .decoupled_weight_decay = false});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam>(optim, "AdamW")
      .def(py::init([](std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return std::make_unique<optim::AdamW>(
                 std::move(params), optim::AdamWOptions{.lr = lr, .beta1 = betas.first, .beta2 = betas.second, .eps = eps,
                                                        .weight_decay = weight_decay});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.01);
  optim.def("clip_grad_norm_", [](const std::vector<Tensor>& params, double max_norm) {
    return optim::clip_grad_norm(params, max_norm);
  }, py::arg("parameters"), py::arg("max_norm"), "scales the grads to a total norm of at most max_norm; returns the norm");
  // The schedules weft train uses: pure functions of the step (weft/optim.py wraps them as PyTorch's
  // stateful schedulers).
  py::class_<optim::LRSchedule>(optim, "LRSchedule")
      .def("lr_at", &optim::LRSchedule::lr_at, py::arg("step"), "the learning rate of update `step` (0: the first)");
  py::class_<optim::ConstantLR, optim::LRSchedule>(optim, "ConstantSchedule")
      .def(py::init<double>(), py::arg("lr"));
  py::class_<optim::StepLR, optim::LRSchedule>(optim, "StepSchedule")
      .def(py::init<double, int64_t, double>(), py::arg("base_lr"), py::arg("step_size"), py::arg("gamma") = 0.1);
  py::class_<optim::CosineWarmupLR, optim::LRSchedule>(optim, "CosineWarmupSchedule")
      .def(py::init<double, int64_t, int64_t, double>(), py::arg("base_lr"), py::arg("warmup_steps"),
           py::arg("total_steps"), py::arg("min_lr") = 0.0);

  // weft.amp: autocast's scope and fp16's loss scaler, the ones weft train --precision uses.
  py::module_ amp = m.def_submodule("amp", "mixed precision: autocast and the fp16 loss scaler");
  struct AutocastScope {
    std::optional<DType> dtype;
    std::unique_ptr<AutocastGuard> guard;
  };
  py::class_<AutocastScope>(amp, "autocast")
      .def(py::init([](std::optional<DType> dtype, bool enabled) {
             return AutocastScope{enabled ? dtype : std::nullopt, nullptr};
           }),
           py::arg("dtype") = DType::bf16, py::arg("enabled") = true)
      .def("__enter__", [](AutocastScope& scope) {
        WEFT_CHECK(!scope.guard, ValueError, "autocast: this scope is already entered");
        scope.guard = std::make_unique<AutocastGuard>(scope.dtype);
      })
      .def("__exit__", [](AutocastScope& scope, const py::args&) { scope.guard.reset(); });
  amp.def("autocast_dtype", &autocast_dtype, "the low-precision dtype of the autocast scope around the call, or None");
  py::class_<amp::GradScaler>(amp, "GradScaler")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval) {
             return amp::GradScaler({.init_scale = init_scale, .growth_factor = growth_factor,
                                     .backoff_factor = backoff_factor, .growth_interval = growth_interval,
                                     .min_scale = amp::GradScalerOptions{}.min_scale});
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0, py::arg("backoff_factor") = 0.5,
           py::arg("growth_interval") = 2000)
      .def("scale", &amp::GradScaler::scale, py::arg("loss"))
      .def("unscale_", &amp::GradScaler::unscale_, py::arg("optimizer"))
      .def("step", [](amp::GradScaler& s, optim::Optimizer& o) {
        py::gil_scoped_release release;
        return s.step(o);
      }, py::arg("optimizer"), "steps unless a gradient is inf or NaN; returns whether it stepped")
      .def("update", &amp::GradScaler::update)
      .def("get_scale", &amp::GradScaler::current_scale)
      .def_property_readonly("skipped_steps", &amp::GradScaler::skipped_steps);

  m.def("cat", [](const std::vector<Tensor>& ts, int64_t dim) { return cat(ts, dim); }, py::arg("tensors"),
        py::arg("dim") = 0);
  m.def("stack", [](const std::vector<Tensor>& ts, int64_t dim) { return stack(ts, dim); }, py::arg("tensors"),
        py::arg("dim") = 0);
  // safetensors, as weft writes and reads them: a checkpoint of weft.train.fit (or of weft train)
  // loads into the model it was trained from with model.load_state_dict(weft.load(path)).
  m.def("load", [](const std::string& path) {
    py::dict tensors;
    for (const auto& [name, t] : infer::load_weights(path).state) tensors[py::str(name)] = t;
    return tensors;
  }, py::arg("path"), "the tensors of a .safetensors file, or of the checkpoint in a weft train --out directory, by name");
  m.def("save", [](const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path) {
    io::save_safetensors(path, tensors);
  }, py::arg("tensors"), py::arg("path"), "writes (name, tensor) pairs to a .safetensors file, atomically");
  add_train(m);
  add_dlpack(m);
}
