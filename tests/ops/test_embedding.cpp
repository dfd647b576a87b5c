#include "gradcheck.h"
#include "weft/ops/embedding.h"

#include <cstring>

#include "weft/core/random.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"
#include "weft/ops/reduce.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

TEST(Embedding, LooksUpRows) {
  Tensor w = Tensor::arange(15).reshape({5, 3});
  Tensor idx = Tensor::from_vector<int64_t>({0, 4, 4, 1}, {2, 2});
  Tensor out = embedding(idx, w);
  ASSERT_EQ(out.shape(), Shape({2, 2, 3}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 1, 2, 12, 13, 14, 12, 13, 14, 3, 4, 5}));
  EXPECT_EQ(embedding(Tensor::from_vector<int64_t>({2}, {}), w).shape(), Shape({3}));  // 0-d indices
  EXPECT_EQ(embedding(Tensor::zeros({0}, DType::i64), w).shape(), Shape({0, 3}));
  // Strided (non-contiguous) indices and weight.
  Tensor wt = Tensor::arange(15).reshape({3, 5}).t();  // row i = [i, i + 5, i + 10]
  Tensor idx2 = Tensor::from_vector<int64_t>({0, 4, 2, 1}, {2, 2}).t();  // 0 2 4 1
  EXPECT_EQ(embedding(idx2, wt).to_vector<float>(), (std::vector<float>{0, 5, 10, 2, 7, 12, 4, 9, 14, 1, 6, 11}));
}

TEST(Embedding, BackwardScatterAddsRows) {
  Tensor w = Tensor::zeros({4, 2});
  w.requires_grad_(true);
  Tensor idx = Tensor::from_vector<int64_t>({3, 1, 3, 3}, {4});
  Tensor g = Tensor::from_vector<float>({1, 2, 10, 20, 100, 200, 1000, 2000}, {4, 2});
  embedding(idx, w).backward(g);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 10, 20, 0, 0, 1101, 2202}));
}

TEST(Embedding, Bf16GradientAccumulatesInF32) {
  // 300 ones into one bf16 row: summing in bf16 would stall at 256 (its spacing there is 2).
  Tensor w = Tensor::zeros({2, 4}, DType::bf16);
  w.requires_grad_(true);
  Tensor idx = Tensor::zeros({300}, DType::i64);
  sum(embedding(idx, w)).backward();
  // Checked element by element: GCC 12 with AVX-512 miscompiles the literal {300 x 4, 0 x 4}.
  std::vector<float> grad = w.grad().to_vector<float>();
  for (size_t k = 0; k < grad.size(); ++k) EXPECT_EQ(grad[k], k < 4 ? 300.0f : 0.0f) << k;
}

TEST(Embedding, ParallelMatchesPlainLoop) {
  // 512 x 96 is above kParallelGrain, and 96 columns make two blocks of backward tasks.
  const int64_t V = 50, D = 96, n = 512;
  Generator gen(1);
  Tensor w = Tensor::randn({V, D}, gen);
  w.requires_grad_(true);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 13) % V;
  Tensor g = Tensor::randn({n, D}, gen);
  Tensor out = embedding(Tensor::from_vector(ids, {n}), w);
  out.backward(g);
  std::vector<float> wv = w.to_vector<float>(), ov = out.to_vector<float>(), gv = g.to_vector<float>();
  std::vector<double> expected(V * D, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < D; ++j) {
      ASSERT_EQ(ov[i * D + j], wv[ids[i] * D + j]);
      expected[ids[i] * D + j] += gv[i * D + j];
    }
  std::vector<float> grad = w.grad().to_vector<float>();
  for (int64_t k = 0; k < V * D; ++k) ASSERT_NEAR(grad[k], expected[k], 1e-4) << k;
}

// A tied weight (GPT's wte: the embedding and the output projection): the embedding's rows go
// into the projection's gradient in place, and the sum must equal, bit for bit, the two gradients
// computed apart and added, whichever op's backward runs first.
TEST(Embedding, TiedWeightGradientEqualsTheSumOfBothUsesBitForBit) {
  const int64_t V = 50, D = 70, T = 300;  // many repeated tokens; D spans two column blocks
  Generator gen(7);
  std::vector<int64_t> tokens(T);
  for (int64_t i = 0; i < T; ++i) tokens[i] = (i * 37 + i * i) % V;
  Tensor idx = Tensor::from_vector(tokens, {T});
  Tensor h = Tensor::randn({T, D}, gen), g_emb = Tensor::randn({T, D}, gen), g_out = Tensor::randn({T, V}, gen);
  auto grad_of = [&](bool use_embedding, bool use_projection, bool embedding_first) {
    Generator weights(11);
    Tensor w = Tensor::randn({V, D}, weights);
    w.requires_grad_(true);
    Tensor loss;
    auto embedding_term = [&] { return sum(mul(embedding(idx, w), g_emb)); };
    auto projection_term = [&] { return sum(mul(linear(h, w, Tensor()), g_out)); };
    if (use_embedding && use_projection) {
      Tensor first = embedding_first ? embedding_term() : projection_term();
      Tensor second = embedding_first ? projection_term() : embedding_term();
      loss = add(first, second);
    } else {
      loss = use_embedding ? embedding_term() : projection_term();
    }
    loss.backward();
    return w.grad();
  };
  Tensor apart = add(grad_of(false, true, false), grad_of(true, false, false));
  for (bool embedding_first : {true, false}) {
    Tensor tied = grad_of(true, true, embedding_first);
    ASSERT_EQ(tied.numel(), apart.numel());
    EXPECT_EQ(std::memcmp(tied.data_ptr(), apart.data_ptr(), apart.nbytes()), 0) << "embedding first: " << embedding_first;
  }
}

TEST(EmbeddingGrad, Weight) {
  Tensor idx = Tensor::from_vector<int64_t>({2, 0, 2, 5, 1, 2}, {2, 3});
  expect_gradcheck([](auto& x) { return embedding(x[0], x[1]); }, {idx, randn64({6, 4}, 1)}, {false, true});
}

TEST(Embedding, BadInputs) {
  Tensor w = Tensor::zeros({10, 3});
  try {
    embedding(Tensor::from_vector<int64_t>({1, 10}, {2}), w);
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("index 10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10 rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(embedding(Tensor::from_vector<int64_t>({-1}, {1}), w), IndexError);
  EXPECT_THROW(embedding(Tensor::zeros({2}, DType::i32), w), DTypeError);
  EXPECT_THROW(embedding(Tensor::zeros({2}, DType::f32), w), DTypeError);
  EXPECT_THROW(embedding(Tensor::zeros({2}, DType::i64), Tensor::zeros({10})), ShapeError);
}

}  // namespace
}  // namespace weft
