// DLPack (Python's array API exchange, dmlc/dlpack 0.6 from Debian's libdlpack-dev): weft tensors
// to PyTorch, NumPy and anything else that speaks it, and back, without a copy and with every
// floating type, bf16 included (NumPy's buffer protocol has no bf16).
//
//   torch.from_dlpack(t)       a torch tensor sharing t's memory (t.__dlpack__ makes the capsule)
//   weft.from_dlpack(x)        a weft tensor sharing x's memory (x: anything with __dlpack__)
//
// The capsule protocol: __dlpack__ returns a PyCapsule named "dltensor" holding a DLManagedTensor;
// the consumer renames it "used_dltensor" and calls the managed tensor's deleter when it is done.
// An unconsumed capsule deletes it when it is collected. bool has no type every reader takes in
// DLPack 0.6 (PyTorch 1.13 reads it as uint8), so it is refused both ways rather than retyped.
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/tensor.h"

namespace py = pybind11;
using namespace weft;

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

struct DTypeCode {
  DType dtype;
  DLDataTypeCode code;
};
constexpr DTypeCode kDTypeCodes[] = {
    {DType::f64, kDLFloat}, {DType::f32, kDLFloat}, {DType::f16, kDLFloat}, {DType::bf16, kDLBfloat},
    {DType::i64, kDLInt},   {DType::i32, kDLInt},   {DType::i8, kDLInt},    {DType::u8, kDLUInt},
};

DLDataType dl_type_of(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.dtype == dtype)
      return {static_cast<uint8_t>(c.code), static_cast<uint8_t>(8 * dtype_size(dtype)), 1};
  throw DTypeError(str("DLPack: ", dtype_name(dtype), " has no type every DLPack reader takes; convert it first, "
                       "t.to(weft.u8)"));
}

DType dtype_of(const DLDataType& type) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.code == type.code && 8 * dtype_size(c.dtype) == type.bits && type.lanes == 1) return c.dtype;
  throw DTypeError(str("DLPack: no weft dtype for type code ", int(type.code), " of ", int(type.bits), " bits and ",
                       type.lanes, " lanes"));
}

// What a DLManagedTensor of weft's keeps alive: the tensor (its storage) and the arrays the
// DLTensor points to.
struct Exported {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

py::capsule to_dlpack(const Tensor& t) {
  auto exported = std::make_unique<Exported>();
  exported->tensor = t.detach();
  exported->shape = t.shape();
  exported->strides = t.strides();
  DLTensor& dl = exported->managed.dl_tensor;
  dl.data = t.storage().data();
  dl.byte_offset = static_cast<uint64_t>(t.storage_offset()) * dtype_size(t.dtype());
  dl.device = {t.device().is_cpu() ? kDLCPU : kDLCUDA, t.device().index};
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = dl_type_of(t.dtype());
  dl.shape = exported->shape.data();
  dl.strides = exported->strides.data();
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); };
  DLManagedTensor* managed = &exported.release()->managed;
  // A capsule nobody consumed still owns the managed tensor; a consumer renamed it and owns it now.
  return py::capsule(managed, kCapsuleName, [](PyObject* capsule) {
    if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    m->deleter(m);
  });
}

Tensor from_dlpack(const py::object& source) {
  WEFT_CHECK(py::hasattr(source, "__dlpack__"), DTypeError, "from_dlpack: a ",
             py::str(py::type::of(source).attr("__name__")).cast<std::string>(), " has no __dlpack__");
  py::capsule capsule = source.attr("__dlpack__")();
  WEFT_CHECK(PyCapsule_IsValid(capsule.ptr(), kCapsuleName), ValueError,
             "from_dlpack: __dlpack__ did not return an unused \"dltensor\" capsule");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  // Owned from here on, whatever follows: the deleter runs when the last tensor of its bytes dies.
  std::shared_ptr<void> owner(managed, [](void* m) {
    auto* dl = static_cast<DLManagedTensor*>(m);
    if (dl->deleter) dl->deleter(dl);
  });
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  const DLTensor& dl = managed->dl_tensor;
  WEFT_CHECK(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDA, DeviceError,
             "from_dlpack: the memory is on DLPack device type ", int(dl.device.device_type),
             "; weft takes the CPU's (1) and CUDA's (2)");
  const Device device = dl.device.device_type == kDLCPU ? Device::cpu() : Device::cuda(dl.device.device_id);
  const DType dtype = dtype_of(dl.dtype);
  Shape shape(dl.shape, dl.shape + dl.ndim), strides(dl.ndim);
  int64_t span = 1;
  for (int32_t d = dl.ndim - 1; d >= 0; --d) {
    WEFT_CHECK(!dl.strides || dl.strides[d] >= 0, ValueError, "from_dlpack: negative strides have no weft view");
    strides[d] = dl.strides ? dl.strides[d] : (d + 1 < dl.ndim ? strides[d + 1] * shape[d + 1] : 1);
    span += (shape[d] - 1) * strides[d];
  }
  for (int64_t size : shape)
    if (size == 0) span = 0;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::borrow(static_cast<char*>(dl.data) + dl.byte_offset,
                                  static_cast<size_t>(span) * dtype_size(dtype), std::move(owner), device);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace

void add_dlpack(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def("__dlpack__", [](const Tensor& t, const py::object&) { return to_dlpack(t); },
             py::arg("stream") = py::none(), "a DLPack capsule of the tensor's memory (no copy)");
  tensor.def("__dlpack_device__", [](const Tensor& t) {
    return std::pair<int, int>(t.device().is_cpu() ? kDLCPU : kDLCUDA, t.device().index);
  });
  m.def("from_dlpack", &from_dlpack, py::arg("tensor"),
        "a tensor sharing the memory of anything with __dlpack__ (a torch tensor, a NumPy array), bf16 included");
}
