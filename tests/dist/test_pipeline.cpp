// Pipeline parallelism. The schedules as plain functions (the passes each stage runs, the timeline
// and its bubble), and under mpirun (2 and 4 ranks, a stage each) a GPT cut into stages: in f64,
// with either schedule, the step's loss and every parameter's gradient are the whole model's.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/core/random.h"
#include "weft/dist/pipeline.h"
#include "weft/ops/arith.h"
#include "weft/ops/loss.h"

#include "dist/largest_difference.h"

namespace weft::dist {
namespace {

using testing::largest_difference;

ProcessGroup& group() { return ProcessGroup::world(); }

std::string passes_text(const std::vector<PipelinePass>& passes) {
  std::string out;
  for (const PipelinePass& p : passes) out += str(out.empty() ? "" : " ", p.forward ? "F" : "B", p.micro + 1);
  return out;
}

TEST(PipelineSchedule, EachStagesPasses) {
  EXPECT_EQ(passes_text(stage_passes(PipelineSchedule::gpipe, 1, 2, 3)), "F1 F2 F3 B1 B2 B3");
  // 1F1B, 4 stages, 6 micro-batches: P - s - 1 warm-up forwards, then one forward and one backward.
  EXPECT_EQ(passes_text(stage_passes(PipelineSchedule::one_f_one_b, 0, 4, 6)), "F1 F2 F3 F4 B1 F5 B2 F6 B3 B4 B5 B6");
  EXPECT_EQ(passes_text(stage_passes(PipelineSchedule::one_f_one_b, 2, 4, 6)), "F1 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 B6");
  EXPECT_EQ(passes_text(stage_passes(PipelineSchedule::one_f_one_b, 3, 4, 6)), "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6");
  EXPECT_THROW(stage_passes(PipelineSchedule::one_f_one_b, 0, 4, 3), ValueError);
  EXPECT_THROW(parse_pipeline_schedule("zero-bubble"), ValueError);
}

// In slots of one pass each, both schedules idle (P - 1) / (m + P - 1) of the time.
TEST(PipelineSchedule, TheTimelineAndItsBubble) {
  const PipelineTimeline gpipe = pipeline_timeline(PipelineSchedule::gpipe, 2, 4);
  EXPECT_EQ(gpipe.draw(), "stage 0: F1 F2 F3 F4 .. .. B1 B2 B3 B4\n"
                          "stage 1: .. F1 F2 F3 F4 B1 B2 B3 B4 ..\n");
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (int64_t p : {2, 3, 4})
      for (int64_t m : {4, 8}) {
        const double bubble = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
        EXPECT_NEAR(pipeline_timeline(schedule, p, m).idle_fraction(), bubble, 1e-12)
            << pipeline_schedule_name(schedule) << " p " << p << " m " << m << "\n"
            << pipeline_timeline(schedule, p, m).draw();
      }
  EXPECT_EQ(pipeline_timeline(PipelineSchedule::one_f_one_b, 2, 4).draw(),
            "stage 0: F1 F2 .. B1 F3 B2 F4 B3 .. B4\n"
            "stage 1: .. F1 B1 F2 B2 F3 B3 F4 B4 ..\n");
}

const nn::GPTConfig kGpt{.layers = 4, .heads = 2, .dim = 16, .context = 8, .vocab = 20};
constexpr int64_t kMicroBatches = 4, kRows = 2, kLength = 7;

std::shared_ptr<nn::GPT> small_gpt() {
  manual_seed(5);
  auto model = std::make_shared<nn::GPT>(kGpt);
  model->to(DType::f64);
  return model;
}

// Micro-batch i's tokens [2, 7] and next tokens [14].
Tensor tokens(int64_t micro, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kRows * kLength; ++i) ids.push_back((i * 7 + micro * 3 + salt) % kGpt.vocab);
  return Tensor::from_vector(ids, {kRows, kLength});
}

// The loss of a step is the mean cross-entropy over all its predictions; each micro-batch adds its
// share, so the summed gradients are the whole batch's.
Tensor micro_loss(const Tensor& logits, int64_t micro) {
  const double predictions = static_cast<double>(kMicroBatches * kRows * kLength);
  return mul(cross_entropy(logits.view({kRows * kLength, kGpt.vocab}), tokens(micro, 1).reshape({-1}), Reduction::sum),
             1.0 / predictions);
}

TEST(Pipeline, GptStagesTakeTheWholeModelsLossAndGradientsWithEitherSchedule) {
  const int rank = group().rank(), size = group().size();
  std::shared_ptr<nn::GPT> whole = small_gpt();
  double loss = 0;
  for (int64_t i = 0; i < kMicroBatches; ++i) {
    Tensor l = micro_loss((*whole)(tokens(i, 0)), i);
    loss += l.item();
    l.backward();
  }
  std::map<std::string, Tensor> expected;
  for (const auto& [name, p] : whole->named_parameters()) expected[name] = p.grad();

  std::shared_ptr<nn::GPT> source = small_gpt();
  GPTStage stage(*source, rank, size);
  EXPECT_EQ(stage.end_block - stage.first_block, kGpt.layers / size);
  const bool last = rank == size - 1;
  const StageFunction function{.forward = [&](const Tensor& x, int64_t micro) {
                                 const Tensor y = stage(x);
                                 return last ? micro_loss(y, micro) : y;
                               },
                               .activation = {kRows, kLength, kGpt.dim},
                               .dtype = DType::f64};
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    const std::string what = str(pipeline_schedule_name(schedule), ", stage ", rank, " of ", size);
    for (Tensor& p : stage.parameters()) p.set_grad(Tensor());
    const PipelineStepResult r =
        run_pipeline_step(group(), schedule, kMicroBatches, function, [](int64_t micro) { return tokens(micro, 0); });
    stage.tie_gradients(group());
    if (last) {
      EXPECT_LT(std::abs(r.loss_sum - loss), 1e-12) << what;
    }
    EXPECT_EQ(r.max_in_flight, schedule == PipelineSchedule::gpipe ? kMicroBatches : size - rank) << what;
    size_t compared = 0;
    for (const auto& [name, p] : stage.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name << " " << what;
      EXPECT_LT(largest_difference(p.grad(), expected.at(name)), 1e-12) << name << " " << what;
      ++compared;
    }
    const size_t per_block = 12, embeddings = rank == 0 ? 2 : last ? 1 : 0, final_norm = last ? 2 : 0;
    EXPECT_EQ(compared, per_block * static_cast<size_t>(kGpt.layers / size) + embeddings + final_norm) << what;
  }
}

TEST(Pipeline, FewerBlocksThanStagesAreRefused) {
  std::shared_ptr<nn::GPT> whole = small_gpt();
  EXPECT_THROW(GPTStage(*whole, 0, kGpt.layers + 1), ValueError);
}

}  // namespace
}  // namespace weft::dist
