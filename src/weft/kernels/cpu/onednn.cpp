#include "weft/kernels/cpu/onednn.h"

namespace weft::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

namespace {

// The ISA values are nested bit sets: an ISA holds every bit of the ones it extends.
bool has(dnnl::cpu_isa wanted) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(wanted)) == static_cast<unsigned>(wanted);
}

}  // namespace

bool int8_pairs_saturate() { return !has(dnnl::cpu_isa::avx512_core_vnni) && !has(dnnl::cpu_isa::avx2_vnni); }

Bf16Support bf16_support() {
  if (has(dnnl::cpu_isa::avx512_core_bf16)) return Bf16Support::native;
  if (has(dnnl::cpu_isa::avx512_core)) return Bf16Support::emulated;
  return Bf16Support::none;
}

bool computes_in(DType t) {
  if (t == DType::f16) return false;
  return t != DType::bf16 || bf16_support() != Bf16Support::none;
}

bool supports(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::i8 || t == DType::u8 ||
         t == DType::i32;
}

dnnl::memory::data_type data_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i8: return dt::s8;
    case DType::u8: return dt::u8;
    case DType::i32: return dt::s32;
    default: throw DTypeError(str("oneDNN has no ", dtype_name(t), " support"));
  }
}

dnnl::memory::desc desc(const Tensor& t) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  if (dims.empty()) dims = strides = {1};
  return dnnl::memory::desc(dims, data_type(t.dtype()), strides);
}

dnnl::memory::desc desc(const Tensor& t, const dnnl::memory::dims& dims) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(dims, data_type(t.dtype()), strides);
}

dnnl::memory memory(const Tensor& t) { return dnnl::memory(desc(t), engine(), t.data_ptr()); }

dnnl::memory memory(const dnnl::memory::desc& d, const Tensor& t) {
  return dnnl::memory(d, engine(), t.data_ptr());
}

dnnl::memory::desc channels_last_desc(const Shape& nchw, DType dtype) {
  return dnnl::memory::desc(dnnl::memory::dims(nchw.begin(), nchw.end()), data_type(dtype),
                            dnnl::memory::format_tag::nhwc);
}

}  // namespace weft::cpu::onednn
