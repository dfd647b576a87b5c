// The model kinds' names are what checkpoints hold in weft.model and trainer.json, and what
// --model takes: they must not change, or the checkpoints written before stop loading.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/core/error.h"
#include "weft/nn/model_kind.h"

namespace weft::nn {
namespace {

TEST(ModelKind, NamesAreTheOnesCheckpointsHold) {
  EXPECT_EQ(model_kind_names(), (std::vector<std::string>{"mlp", "cnn", "gpt"}));
  for (const std::string& name : model_kind_names()) {
    const std::optional<ModelKind> kind = find_model_kind(name);
    ASSERT_TRUE(kind.has_value()) << name;
    EXPECT_EQ(model_kind_name(*kind), name);
    EXPECT_EQ(parse_model_kind(name), *kind);
  }
  EXPECT_TRUE(is_image_classifier(ModelKind::mlp) && is_image_classifier(ModelKind::cnn));
  EXPECT_FALSE(is_image_classifier(ModelKind::gpt));
}

TEST(ModelKind, OtherNamesAreNoKind) {
  for (const char* name : {"", "GPT", "gpt2", "resnet", "mlp "}) EXPECT_FALSE(find_model_kind(name).has_value()) << name;
  EXPECT_EQ(testing::message_of<ValueError>([] { parse_model_kind("rnn"); }),
            "--model: must be one of mlp, cnn, gpt, got 'rnn'");
}

}  // namespace
}  // namespace weft::nn
