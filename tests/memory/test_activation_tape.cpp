// The replay's bookkeeping on tapes small enough to follow by hand (sizes are multiples of 512, so
// the allocator's rounding leaves them as they are).
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/core/error.h"
#include "weft/memory/activation_tape.h"

namespace weft::memory {
namespace {

using testing::contains;
using Grad = ActivationTape::Grad;

// x (input, 1024) -> a (keeps x, 2048) -> b (keeps a, 4096) -> loss (keeps b, 512, held).
ActivationTape chain(int64_t a_params = 0, int64_t b_params = 0) {
  ActivationTape tape;
  auto x = tape.input(1024);
  auto a = tape.record({.name = "a", .inputs = {x}, .grads = {Grad::none}, .output_bytes = 2048, .saved = {x},
                        .param_grads = a_params});
  auto b = tape.record({.name = "b", .inputs = {a}, .grads = {Grad::fresh}, .output_bytes = 4096, .saved = {a},
                        .param_grads = b_params});
  tape.hold(tape.record({.name = "loss", .inputs = {b}, .grads = {Grad::fresh}, .output_bytes = 512, .saved = {b}}));
  return tape;
}

TEST(ActivationTapeTest, SavedTensorsLiveUntilTheirBackward) {
  ActivationTape tape = chain();
  EXPECT_EQ(tape.bytes_after_forward(), 1024 + 2048 + 4096 + 512);
  // Backward of loss: everything saved, the seed (512) and b's new gradient (4096).
  ActivationTape::Peak peak = tape.replay();
  EXPECT_EQ(peak.bytes, 1024 + 2048 + 4096 + 512 + 512 + 4096);
  EXPECT_TRUE(contains(peak.where, "backward of loss")) << peak.where;
}

TEST(ActivationTapeTest, GradientsAreAliveInTheForwardOnlyWhenTheLoopKeepsThem) {
  ActivationTape tape = chain(100, 50);
  // 150 parameters at 100 bytes: 15000 bytes of gradients. With last step's gradients kept through
  // the forward, its end is the peak; without them, the end of the backward (all gradients, x, the
  // loss and a's gradient).
  ActivationTape::Peak kept =
      tape.replay({.resident_bytes = 0, .grad_bytes_per_param = 100, .grads_alive_in_forward = true});
  EXPECT_EQ(kept.bytes, 7680 + 15000);
  EXPECT_TRUE(contains(kept.where, "forward of loss")) << kept.where;
  ActivationTape::Peak dropped =
      tape.replay({.resident_bytes = 0, .grad_bytes_per_param = 100, .grads_alive_in_forward = false});
  EXPECT_EQ(dropped.bytes, 1024 + 512 + 2048 + 15000);
  EXPECT_TRUE(contains(dropped.where, "backward of a")) << dropped.where;
  ActivationTape::Peak resident =
      tape.replay({.resident_bytes = 10000, .grad_bytes_per_param = 2, .grads_alive_in_forward = true});
  EXPECT_EQ(resident.bytes, 12288 + 10000) << "gradients are not back yet at the loss's backward";
}

TEST(ActivationTapeTest, ViewsAllocateNothingAndASecondGradientAllocatesTheSum) {
  ActivationTape tape;
  auto x = tape.input(512);
  auto a = tape.record({.name = "a", .inputs = {x}, .grads = {Grad::none}, .output_bytes = 4096, .saved = {x},
                        .saves_output = true});
  auto v = tape.record({.name = "v", .inputs = {a}, .grads = {Grad::forwarded}, .output_bytes = 4096, .view = true});
  EXPECT_EQ(tape.bytes(v), 4096);
  tape.hold(tape.record({.name = "twice", .inputs = {v, a}, .grads = {Grad::fresh, Grad::fresh}, .output_bytes = 512}));
  EXPECT_EQ(tape.bytes_after_forward(), 512 + 4096 + 512) << "the view shares a's storage";
  // v's backward hands its gradient on to a, whose slot already holds one from twice: the sum is
  // allocated while both are alive (beside x, a and the loss).
  ActivationTape::Peak peak = tape.replay();
  EXPECT_EQ(peak.bytes, 512 + 4096 + 512 + 2 * 4096 + 4096);
  EXPECT_TRUE(contains(peak.where, "backward of v")) << peak.where;
}

TEST(ActivationTapeTest, CheckpointingKeepsSegmentInputsAndRecomputes) {
  auto build = [](bool checkpointed) {
    ActivationTape tape;
    auto x = tape.input(512);
    if (checkpointed) tape.begin_segment();
    auto a = tape.record({.name = "f1", .inputs = {x}, .grads = {Grad::none}, .output_bytes = 4096, .saved = {x}});
    auto b = tape.record({.name = "f2", .inputs = {a}, .grads = {Grad::fresh}, .output_bytes = 4096, .saved = {a}});
    if (checkpointed) tape.end_segment();
    tape.hold(tape.record({.name = "loss", .inputs = {b}, .grads = {Grad::fresh}, .output_bytes = 512, .saved = {b}}));
    return tape;
  };
  ActivationTape plain = build(false), checkpointed = build(true);
  EXPECT_EQ(plain.bytes_after_forward(), 512 + 4096 + 4096 + 512);
  EXPECT_EQ(checkpointed.bytes_after_forward(), 512 + 4096 + 512) << "f1's output is not kept";
  EXPECT_EQ(plain.replay().bytes, 512 + 4096 + 4096 + 512 + 512 + 4096);
  // The recompute brings f1's and f2's outputs back beside b's gradient, x and the loss.
  ActivationTape::Peak peak = checkpointed.replay();
  EXPECT_EQ(peak.bytes, 512 + 512 + 4096 + 4096 + 4096);
  EXPECT_TRUE(contains(peak.where, "recompute of f2")) << peak.where;
}

TEST(ActivationTapeTest, MalformedTapesAreValueErrors) {
  using testing::message_of;
  ActivationTape tape;
  auto x = tape.input(512);
  EXPECT_TRUE(contains(message_of<ValueError>([&] {
    tape.record({.name = "bad", .inputs = {x + 7}, .grads = {Grad::none}, .output_bytes = 512});
  }), "not recorded"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] {
    tape.record({.name = "bad", .inputs = {x}, .grads = {}, .output_bytes = 512});
  }), "gradient rules"));
  auto y = tape.record({.name = "y", .inputs = {x}, .grads = {Grad::none}, .output_bytes = 512});
  EXPECT_TRUE(contains(message_of<ValueError>([&] {
    tape.record({.name = "bad", .inputs = {y}, .grads = {Grad::fresh}, .output_bytes = 512, .saved = {x}});
  }), "not one of its inputs"));
  EXPECT_THROW(tape.input(512), ValueError) << "inputs come before the ops";
  EXPECT_THROW(tape.hold(x), ValueError) << "inputs are held already";
  EXPECT_THROW(tape.end_segment(), ValueError);
  tape.begin_segment();
  EXPECT_THROW(tape.begin_segment(), ValueError);
  EXPECT_THROW(tape.replay(), ValueError) << "a segment is open";
}

}  // namespace
}  // namespace weft::memory
