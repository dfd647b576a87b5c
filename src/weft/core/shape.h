// Shapes and strides. Strides are in elements (not bytes), as in PyTorch; a stride of 0 repeats
// an element (expand / broadcasting).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace weft {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);  // row-major (C order)
Shape fortran_strides(const Shape& shape);     // column-major (Fortran order)
// NumPy broadcasting: align from the right, sizes must match or be 1. Throws ShapeError naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
std::string shape_str(const Shape& shape);  // "[2, 3]"

}  // namespace weft
