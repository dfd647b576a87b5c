// Tensor-parallel layers under mpirun (2 and 4 ranks): in f64, the split layers give the whole
// layer's outputs, and the gradients of the input and of each rank's slice of the weights are the
// whole layer's, sliced; so does the cross-entropy of logits split by vocabulary, and so does a
// whole GPT made tensor parallel.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/core/random.h"
#include "weft/dist/tensor_parallel.h"
#include "weft/memory/model.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"

#include "dist/largest_difference.h"

namespace weft::dist {
namespace {

using testing::largest_difference;

ProcessGroup& group() { return ProcessGroup::world(); }

struct Wholes {
  nn::Linear first{8, 12}, second{12, 8};
};

// Every rank builds the same layers and input (the same seeds).
Tensor input() {
  Generator gen(7);
  return Tensor::randn({5, 8}, gen, DType::f64).requires_grad_();
}

// sum(y * weights): a loss whose gradient differs in every element.
Tensor loss_of(const Tensor& y) {
  Generator gen(9);
  return sum(mul(y, Tensor::randn(y.shape(), gen, DType::f64)));
}

std::unique_ptr<Wholes> wholes() {
  manual_seed(3);
  auto w = std::make_unique<Wholes>();
  w->first.to(DType::f64);
  w->second.to(DType::f64);
  return w;
}

TEST(TensorParallel, ColumnThenRowIsTheWholeMlpAndItsGradients) {
  const int rank = group().rank(), size = group().size();
  std::unique_ptr<Wholes> whole = wholes();
  Tensor x = input();
  Tensor y = whole->second(gelu(whole->first(x)));
  loss_of(y).backward();

  ColumnParallelLinear column(whole->first, group(), /*gather_output=*/false);
  RowParallelLinear row(whole->second, group(), /*input_is_parallel=*/true);
  Tensor x_tp = input();
  Tensor y_tp = row(gelu(column(x_tp)));
  EXPECT_LT(largest_difference(y_tp.detach(), y.detach()), 1e-12) << size << " ranks";
  loss_of(y_tp).backward();
  EXPECT_LT(largest_difference(x_tp.grad(), x.grad()), 1e-12);
  const int64_t rows = 12 / size;
  EXPECT_LT(largest_difference(column.weight.grad(), whole->first.weight.grad().narrow(0, rank * rows, rows)), 1e-12);
  EXPECT_LT(largest_difference(column.bias.grad(), whole->first.bias.grad().narrow(0, rank * rows, rows)), 1e-12);
  EXPECT_LT(largest_difference(row.weight.grad(), whole->second.weight.grad().narrow(1, rank * rows, rows)), 1e-12);
  EXPECT_LT(largest_difference(row.bias.grad(), whole->second.bias.grad()), 1e-12);
}

TEST(TensorParallel, GatheredColumnsAndScatteredRowsAreTheWholeLayers) {
  const int rank = group().rank(), size = group().size();
  std::unique_ptr<Wholes> whole = wholes();
  Tensor x = input();
  loss_of(whole->second(whole->first(x))).backward();

  ColumnParallelLinear column(whole->first, group(), /*gather_output=*/true);
  RowParallelLinear row(whole->second, group(), /*input_is_parallel=*/false);
  Tensor x_tp = input();
  Tensor h = column(x_tp);
  EXPECT_EQ(h.shape(), (Shape{5, 12}));
  loss_of(row(h)).backward();
  EXPECT_LT(largest_difference(x_tp.grad(), x.grad()), 1e-12) << size << " ranks";
  const int64_t rows = 12 / size;
  EXPECT_LT(largest_difference(column.weight.grad(), whole->first.weight.grad().narrow(0, rank * rows, rows)), 1e-12);
  EXPECT_LT(largest_difference(row.weight.grad(), whole->second.weight.grad().narrow(1, rank * rows, rows)), 1e-12);
}

// Each rank holds a slice of the vocabulary's logits; the loss and each slice's gradient are the
// whole cross-entropy's.
TEST(TensorParallel, VocabParallelCrossEntropyIsTheWholeOnes) {
  const int rank = group().rank(), size = group().size();
  Generator gen(11);
  const Tensor whole = Tensor::randn({6, 12}, gen, DType::f64).requires_grad_();
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 11, 5, 6, 3, 9}, {6});
  Tensor loss = cross_entropy(whole, targets);
  loss.backward();
  const int64_t width = 12 / size;
  Tensor mine = Tensor::empty({6, width}, DType::f64).copy_(whole.detach().narrow(1, rank * width, width)).requires_grad_();
  Tensor loss_tp = vocab_parallel_cross_entropy(mine, targets, group());
  EXPECT_LT(std::abs(loss_tp.item() - loss.item()), 1e-12) << size << " ranks";
  loss_tp.backward();
  EXPECT_LT(largest_difference(mine.grad(), whole.grad().narrow(1, rank * width, width)), 1e-12);
  EXPECT_THROW(vocab_parallel_cross_entropy(mine, Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 12}, {6}), group()),
               IndexError);
}

// A GPT in f64, the same on every rank.
std::shared_ptr<nn::GPT> small_gpt(const nn::GPTConfig& config) {
  manual_seed(5);
  auto model = std::make_shared<nn::GPT>(config);
  model->to(DType::f64);
  return model;
}

const nn::GPTConfig kGpt{.layers = 2, .heads = 4, .dim = 16, .context = 8, .vocab = 20};

Tensor gpt_tokens() {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2 * 7; ++i) ids.push_back((i * 7 + 3) % kGpt.vocab);
  return Tensor::from_vector(ids, {2, 7});
}

Tensor next_tokens() {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2 * 7; ++i) ids.push_back((i * 5 + 1) % kGpt.vocab);
  return Tensor::from_vector(ids, {14});
}

// Heads and the fused q/k/v rows split, the MLP column then row, the embedding and its tied output
// projection by vocabulary: the rank's logits are its slice of the whole model's, the loss is the
// whole one, and every parameter's gradient is the rank's slice of the whole one's (or the whole
// one's, for the parameters every rank holds whole).
TEST(TensorParallel, GptOutputsLossAndEveryGradientAreTheWholeModels) {
  const int rank = group().rank(), size = group().size();
  std::shared_ptr<nn::GPT> whole = small_gpt(kGpt);
  const Tensor logits = (*whole)(gpt_tokens());
  Tensor loss = cross_entropy(logits.view({14, kGpt.vocab}), next_tokens());
  loss.backward();

  std::shared_ptr<nn::GPT> split = small_gpt(kGpt);
  const TensorParallelLayout layout = parallelize_gpt(*split, group());
  EXPECT_EQ(layout.size(), 2 * 6 + 1u);
  const int64_t width = kGpt.vocab / size;
  const Tensor mine = (*split)(gpt_tokens());
  ASSERT_EQ(mine.shape(), (Shape{2, 7, width}));
  EXPECT_LT(largest_difference(mine.detach(), logits.detach().narrow(2, rank * width, width)), 1e-12) << size << " ranks";
  Tensor loss_tp = vocab_parallel_cross_entropy(mine.view({14, width}), next_tokens(), group());
  EXPECT_LT(std::abs(loss_tp.item() - loss.item()), 1e-12);
  loss_tp.backward();

  std::map<std::string, Tensor> whole_grads;
  for (const auto& [name, p] : whole->named_parameters()) whole_grads[name] = p.grad();
  const std::map<std::string, Tensor> expected = slice_state_dict(whole_grads, layout, rank, size);
  size_t compared = 0;
  for (const auto& [name, p] : split->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LT(largest_difference(p.grad(), expected.at(name)), 1e-12) << name << " on rank " << rank << " of " << size;
    ++compared;
  }
  EXPECT_EQ(compared, whole_grads.size());
  // The split model's weights are the whole model's, sliced the same way.
  std::map<std::string, Tensor> whole_weights;
  for (const auto& [name, p] : whole->named_parameters()) whole_weights[name] = p.detach();
  const std::map<std::string, Tensor> sliced = slice_state_dict(whole_weights, layout, rank, size);
  for (const auto& [name, p] : split->named_parameters()) EXPECT_EQ(p.to_vector<double>(), sliced.at(name).to_vector<double>()) << name;
}

// What nn::GPTConfig::block_parameters says tensor parallelism splits is what parallelize_gpt
// splits, and the planner's share of a rank is the tensors the rank holds.
TEST(TensorParallel, GptSplitIsTheOneTheBlockListAndThePlannerDescribe) {
  std::shared_ptr<nn::GPT> split = small_gpt(kGpt);
  const TensorParallelLayout layout = parallelize_gpt(*split, group());
  for (int64_t i = 0; i < kGpt.layers; ++i)
    for (const nn::GPTBlockParameter& p : kGpt.block_parameters())
      EXPECT_EQ(layout.contains(str("h.", i, ".", p.name)), p.tp_split) << p.name;
  std::vector<int64_t> held;
  for (const Tensor& p : split->parameters()) held.push_back(p.numel());
  EXPECT_EQ(memory::ModelDescription::gpt(kGpt, {.tp = group().size()}).parameter_tensors(), held);
}

TEST(TensorParallel, GptHeadsOrVocabularyTheGroupDoesNotDivideAreRefused) {
  if (group().size() == 1) GTEST_SKIP();
  nn::GPTConfig odd_heads = kGpt;
  odd_heads.heads = 1;
  EXPECT_THROW(parallelize_gpt(*small_gpt(odd_heads), group()), ValueError);
  nn::GPTConfig odd_vocab = kGpt;
  odd_vocab.vocab = 21;
  EXPECT_THROW(parallelize_gpt(*small_gpt(odd_vocab), group()), ValueError);
}

TEST(TensorParallel, SizesTheGroupDoesNotDivideAreRefused) {
  if (group().size() == 1) GTEST_SKIP();
  nn::Linear odd(7, 9);
  EXPECT_THROW(ColumnParallelLinear(odd, group(), false), ValueError);
  EXPECT_THROW(RowParallelLinear(odd, group(), true), ValueError);
}

}  // namespace
}  // namespace weft::dist
