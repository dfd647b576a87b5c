#include "weft/nn/linear.h"

#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/nn/init.h"
#include "weft/ops/embedding.h"
#include "weft/ops/linear.h"

namespace weft::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : Module("Linear"), in_features(in_features), out_features(out_features) {
  WEFT_CHECK(in_features > 0 && out_features > 0, ValueError, "Linear: features must be positive, got in=",
             in_features, " out=", out_features);
  weight = register_parameter("weight", Tensor::empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", Tensor::empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  double bound = 1 / std::sqrt(static_cast<double>(in_features));
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features, ", bias=", bias.defined() ? "True" : "False");
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : Module("Embedding"), num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  WEFT_CHECK(num_embeddings > 0 && embedding_dim > 0, ValueError, "Embedding: sizes must be positive, got ",
             num_embeddings, " x ", embedding_dim);
  weight = register_parameter("weight", Tensor::empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

Embedding::Embedding(const char* name, Tensor table)
    : Module(name), num_embeddings(table.size(0)), embedding_dim(table.size(1)) {
  weight = register_parameter("weight", std::move(table));
}

void Embedding::reset_parameters(Generator& gen) { init::normal_(weight, 0, 1, gen); }

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

Tensor Embedding::attend(const Tensor& x) { return linear(x, weight, Tensor()); }

std::shared_ptr<Embedding> Embedding::with_copied_table() const {
  NoGradGuard no_grad;
  return std::make_shared<Embedding>("Embedding", weight.clone());
}

std::string Embedding::extra_repr() const { return str(num_embeddings, ", ", embedding_dim); }

}  // namespace weft::nn
