#include "weft/kernels/cpu/layout.h"

namespace weft::cpu {

Tensor empty_channels_last(const Shape& nchw, DType dtype) {
  WEFT_CHECK(nchw.size() == 4, ShapeError, "empty_channels_last: expected an NCHW shape, got ", shape_str(nchw));
  const int64_t N = nchw[0], C = nchw[1], H = nchw[2], W = nchw[3];
  return Tensor::empty({N * H * W * C}, dtype).as_strided(nchw, {H * W * C, 1, W * C, C}, 0);
}

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  int64_t expected = 1;
  for (int64_t d : {1, 3, 2, 0}) {  // C innermost, then W, H, N
    if (t.size(d) != 1 && t.strides()[d] != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

}  // namespace weft::cpu
