// ProcessGroup under mpirun (CMakeLists.txt runs this program on 2 and on 4 ranks): every rank
// checks its own results against what it computes locally from the values every rank was given.
// Checks are EXPECTs, not ASSERTs, so that a rank that fails still issues the collectives the
// others wait in.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/dist/process_group.h"
#include "weft/dist/world.h"

namespace weft::dist {
namespace {

using testing::contains;
using testing::message_of;

ProcessGroup& group() { return ProcessGroup::world(); }

// Rank r's value at i: small integers, exact in every dtype and in any order of summation.
double value(int r, int64_t i) { return static_cast<double>((r + 1) * (i % 7 + 1)); }

Tensor filled(int r, int64_t n, DType dtype, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i + offset);
  return Tensor::from_vector(v, {n}, dtype);
}

double reduced(ReduceOp op, int64_t i, int size) {
  double sum = 0, top = 0;
  for (int r = 0; r < size; ++r) {
    sum += value(r, i);
    top = std::max(top, value(r, i));
  }
  return op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / size : top;
}

TEST(World, IsTheLaunch) {
  const World& w = world();
  EXPECT_TRUE(w.launched);
  EXPECT_EQ(w.size, std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(w.rank, std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(group().size(), w.size);
  EXPECT_EQ(group().rank(), w.rank);
}

// Every reduction, dtype and a length that world sizes do not divide, both algorithms.
TEST(ProcessGroup, AllReduceSumAvgAndMaxInEveryDtype) {
  const int rank = group().rank(), size = group().size();
  for (bool ring : {false, true})
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
        for (int64_t n : {0, 1, 3, 1001, 300007}) {
          if (n == 300007 && dtype != DType::f32) continue;
          Tensor t = filled(rank, n, dtype);
          if (ring) group().ring_all_reduce(t, op);
          else group().all_reduce(t, op);
          EXPECT_EQ(t.dtype(), dtype);
          const std::vector<double> got = t.to_vector<double>();
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i) {
            // avg of integers is exact in f32 except for its last bit (thirds); 16-bit types round it.
            const double expected = reduced(op, i, size), tolerance = op == ReduceOp::avg ? 1e-2 * expected : 0;
            wrong += std::abs(got[static_cast<size_t>(i)] - expected) > tolerance;
          }
          EXPECT_EQ(wrong, 0) << (ring ? "ring " : "MPI ") << reduce_op_name(op) << " " << dtype_name(dtype) << " n " << n
                              << " rank " << rank;
        }
}

// On values that are not integers the two algorithms add in other orders: equal to f32 rounding.
// Gradient compression: f32 values sent as bf16 or f16. Small integers are exact in both, whatever
// the order of the sums, so the result is exact; values that 16 bits cannot hold come out within
// one rounding per addition of the f32 sum. The group records 2 bytes per element.
TEST(ProcessGroup, CompressedAllReduceSendsSixteenBitsAndAddsInF32) {
  const int rank = group().rank(), size = group().size();
  for (DType wire : {DType::bf16, DType::f16}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      Tensor t = filled(rank, 1001, DType::f32);
      group().all_reduce_async(t, op, wire).wait();
      EXPECT_EQ(group().status().completed.bytes, 1001 * 2) << dtype_name(wire);
      const std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < 1001; ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)], reduced(op, i, size)) << dtype_name(wire) << " element " << i;
    }
    Generator gen(40 + rank);
    Tensor x = Tensor::randn({3000}, gen);
    std::vector<double> exact = x.to_vector<double>();
    Tensor all = Tensor::empty({size * 3000}, DType::f32);
    group().all_gather(x, all);
    const std::vector<double> every = all.to_vector<double>();
    group().all_reduce_async(x, ReduceOp::sum, wire).wait();
    const double eps = wire == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;  // a unit's rounding, relative
    const std::vector<double> got = x.to_vector<double>();
    for (size_t i = 0; i < exact.size(); ++i) {
      double sum = 0, magnitude = 0;
      for (int r = 0; r < size; ++r) {
        sum += every[static_cast<size_t>(r) * 3000 + i];
        magnitude += std::abs(every[static_cast<size_t>(r) * 3000 + i]);
      }
      ASSERT_LE(std::abs(got[i] - sum), eps * size * magnitude) << dtype_name(wire) << " element " << i;
    }
  }
  Tensor t = filled(rank, 8, DType::f32);
  EXPECT_THROW(group().all_reduce_async(t, ReduceOp::max, DType::bf16), ValueError);
  EXPECT_THROW(group().all_reduce_async(t, ReduceOp::sum, DType::f32), DTypeError);
}

TEST(ProcessGroup, RingAllReduceAgreesWithMPIs) {
  const int rank = group().rank();
  for (int64_t n : {5, 65536, 1000003}) {
    Generator gen(100 + static_cast<uint64_t>(rank));
    Tensor mine = Tensor::randn({n}, gen), theirs = mine.clone();
    group().ring_all_reduce(mine, ReduceOp::sum);
    group().all_reduce(theirs, ReduceOp::sum);
    const std::vector<float> a = mine.to_vector<float>(), b = theirs.to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    EXPECT_LT(worst, 1e-5) << "n " << n << " rank " << rank;
  }
}

TEST(ProcessGroup, ReduceScatterAllGatherAndBroadcast) {
  const int rank = group().rank(), size = group().size();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t n = 1001;
    Tensor input = filled(rank, n * size, dtype), output = Tensor::zeros({n}, dtype);
    group().reduce_scatter(input, output, ReduceOp::sum);
    const std::vector<double> share = output.to_vector<double>();
    int64_t wrong = 0;
    for (int64_t j = 0; j < n; ++j) wrong += share[static_cast<size_t>(j)] != reduced(ReduceOp::sum, rank * n + j, size);
    EXPECT_EQ(wrong, 0) << "reduce_scatter " << dtype_name(dtype) << " rank " << rank;
  }
  Tensor mine = Tensor::full({5}, rank * 10.0, DType::i64), all = Tensor::zeros({5 * size}, DType::i64);
  group().all_gather(mine, all);
  const std::vector<int64_t> gathered = all.to_vector<int64_t>();
  for (int r = 0; r < size; ++r)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(gathered[static_cast<size_t>(r * 5 + k)], r * 10) << "all_gather rank " << rank;
  for (int root = 0; root < size; ++root) {
    Tensor t = Tensor::full({3, 4}, rank == root ? 42.0 + root : -1.0);
    group().broadcast(t, root);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(12, static_cast<float>(42 + root))) << "root " << root;
  }
}

TEST(ProcessGroup, SendAndRecvAroundTheRing) {
  const int rank = group().rank(), size = group().size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Tensor out = Tensor::full({1000}, static_cast<double>(rank)), in = Tensor::zeros({1000});
  Work sent = group().send_async(out, next, 7);
  group().recv(in, prev, 7);
  sent.wait();
  EXPECT_EQ(in.to_vector<float>(), std::vector<float>(1000, static_cast<float>(prev)));
}

// Every rank sends to the next and receives from the one before in one blocking call each: with
// 1 MB messages (past MPI's eager limit) two blocking sends facing each other would wait forever.
TEST(ProcessGroup, SendRecvExchangesWithoutDeadlock) {
  const int rank = group().rank(), size = group().size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Tensor out = Tensor::full({1 << 18}, static_cast<double>(rank)), in = Tensor::zeros({1 << 18});
  group().send_recv(out, next, in, prev, 5);
  EXPECT_EQ(in.to_vector<float>(), std::vector<float>(1 << 18, static_cast<float>(prev)));
  EXPECT_THROW(group().send_recv(out, rank, in, prev), IndexError);
}

// A message of the wrong size is received whole and refused: the receiver gets a ShapeError naming
// both sizes, and the group goes on working.
TEST(ProcessGroup, ARecvOfTheWrongSizeIsRefused) {
  const int rank = group().rank();
  if (rank == 0) group().send(Tensor::ones({8}), 1, 3);
  if (rank == 1) {
    Tensor small = Tensor::zeros({4});
    const std::string message = message_of<ShapeError>([&] { group().recv(small, 0, 3); });
    EXPECT_TRUE(contains(message, "rank 0 sent 32 bytes")) << message;
    EXPECT_TRUE(contains(message, "holds 16")) << message;
  }
  Tensor t = Tensor::ones({2});
  group().all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, static_cast<float>(group().size())));
}

// The caller never enters MPI, yet an all-reduce issued before it goes to sleep is done when it
// wakes: the group's own thread moved it. The last rank joins late, so elsewhere the all-reduce
// cannot have finished right after it was issued. Sequence numbers count every operation.
TEST(ProcessGroup, AnAsyncAllReduceCompletesWhileTheCallerDoesOtherThings) {
  const int rank = group().rank(), size = group().size();
  group().barrier();
  if (rank == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Tensor t = filled(rank, 1 << 20, DType::f32);
  const int64_t before = group().status().issued.seq;
  Work w = group().all_reduce_async(t, ReduceOp::sum);
  EXPECT_EQ(w.seq(), before + 1);
  if (rank != size - 1) {
    EXPECT_FALSE(w.test()) << "rank " << rank;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_TRUE(w.test()) << "rank " << rank;
  w.wait();
  w.wait();
  EXPECT_EQ(t.to_vector<float>()[9], static_cast<float>(reduced(ReduceOp::sum, 9, size)));
  const ProcessGroup::Status s = group().status();
  EXPECT_EQ(s.completed.seq, w.seq());
  EXPECT_EQ(s.completed.op, "all_reduce");
  EXPECT_EQ(s.completed.bytes, (int64_t{1} << 20) * 4);
}

TEST(ProcessGroup, SplitMakesGroupsOfTheirOwn) {
  const int rank = group().rank(), size = group().size();
  std::unique_ptr<ProcessGroup> half = group().split(rank % 2, rank);
  EXPECT_EQ(half->size(), (size + 1 - rank % 2) / 2);
  EXPECT_EQ(half->rank(), rank / 2);
  Tensor t = Tensor::full({4}, static_cast<double>(rank));
  half->all_reduce(t, ReduceOp::sum);
  double expected = 0;
  for (int r = rank % 2; r < size; r += 2) expected += r;
  EXPECT_EQ(t.to_vector<float>()[0], static_cast<float>(expected));
}

// Mistakes a rank can see on its own are refused there, before anything is sent.
TEST(ProcessGroup, BadArgumentsAreRefusedBeforeCommunicating) {
  const int size = group().size(), rank = group().rank();
  Tensor out = Tensor::zeros({4});
  EXPECT_THROW(group().reduce_scatter(Tensor::zeros({4 * size + 1}), out, ReduceOp::sum), ShapeError);
  Tensor gathered = Tensor::zeros({4 * size - 1});
  EXPECT_THROW(group().all_gather(out, gathered), ShapeError);
  Tensor ints = Tensor::zeros({4}, DType::i64);
  EXPECT_THROW(group().all_reduce(ints, ReduceOp::sum), DTypeError);
  EXPECT_THROW(group().broadcast(out, size), IndexError);
  EXPECT_THROW(group().send(out, rank, 0), IndexError);
  Tensor strided = Tensor::zeros({4, 4}).t();
  EXPECT_THROW(group().all_reduce(strided, ReduceOp::sum), ValueError);
  Tensor t = Tensor::ones({1});
  group().all_reduce(t, ReduceOp::sum);  // and the group still works
  EXPECT_EQ(t.item(), size);
}

}  // namespace
}  // namespace weft::dist

// The other ranks print only their failures, each line with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed())
      std::printf("rank %d: %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                  result.line_number(), result.message());
  }

 private:
  int rank_;
};

// Every rank runs every test; rank 0 prints gtest's progress, the others their failures, and the
// program fails if any rank failed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const weft::dist::World& w = weft::dist::world();
  if (w.rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(w.rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  weft::Tensor any = weft::Tensor::scalar(failed);
  weft::dist::ProcessGroup::world().all_reduce(any, weft::dist::ReduceOp::max);
  return any.item() != 0 ? 1 : 0;
}
