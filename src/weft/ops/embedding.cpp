#include "weft/ops/embedding.h"

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  WEFT_CHECK(indices.defined() && weight.defined(), ValueError, "embedding: undefined tensor");
  WEFT_CHECK(indices.dtype() == DType::i64, DTypeError, "embedding: indices must be i64, got ",
             dtype_name(indices.dtype()), " (convert them with .to(DType::i64))");
  WEFT_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be [num_embeddings, dim], got ",
             shape_str(weight.shape()));
  const int64_t V = weight.shape()[0], D = weight.shape()[1];
  monitor::OpScope scope(Op::embedding, {indices, weight});
  Tensor out = kernels::of(weight).embedding(indices, weight);
  Tensor idx = indices.contiguous_untracked();
  if (scope.active()) scope.set_cost_per_element(out, {indices, out, out});  // the rows read, and written
  record(op_name(Op::embedding), {indices, weight}, {out}, [idx, V, D](const Grads& g) {
    const kernels::KernelTable& k = kernels::of(g[0]);
    Tensor* gathered = autograd::gathered_gradient(1);
    if (gathered && k.embedding_backward_into(*gathered, g[0], idx)) return Grads{Tensor(), Tensor()};
    return Grads{Tensor(), k.embedding_backward(g[0], idx, V, D)};
  });
  return out;
}

}  // namespace weft
