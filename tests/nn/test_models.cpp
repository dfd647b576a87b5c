// The built-in classifiers at other shapes than 28x28 grey in ten classes, and their default
// being the models earlier checkpoints hold.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/nn/models.h"

namespace weft::nn {
namespace {

using weft::testing::message_of;

TEST(Models, DefaultShapesAreTheFashionMnistModels) {
  const StateDict mlp = make_mlp()->state_dict(), cnn = make_cnn()->state_dict();
  EXPECT_EQ(mlp.at("1.weight").shape(), (Shape{512, 784}));
  EXPECT_EQ(mlp.at("5.weight").shape(), (Shape{10, 256}));
  EXPECT_EQ(cnn.at("0.weight").shape(), (Shape{32, 1, 3, 3}));
  EXPECT_EQ(cnn.at("7.weight").shape(), (Shape{128, 1600}));
  EXPECT_EQ(cnn.at("9.weight").shape(), (Shape{10, 128}));
  // The same draws from the same generator as an explicit default shape.
  manual_seed(3);
  const std::vector<float> a = make_cnn()->state_dict().at("7.weight").to_vector<float>();
  manual_seed(3);
  const std::vector<float> b = make_cnn({.input = {1, 28, 28}, .classes = 10})->state_dict().at("7.weight").to_vector<float>();
  EXPECT_EQ(a, b);
}

TEST(Models, OtherImagesAndTablesTakeTheirShapes) {
  // 16x14: ((16 - 2) / 2 - 2) / 2 = 2 rows, ((14 - 2) / 2 - 2) / 2 = 2 columns of 64 channels.
  auto cnn = make_cnn({.input = {3, 16, 14}, .classes = 5});
  EXPECT_EQ(cnn->state_dict().at("7.weight").shape(), (Shape{128, 256}));
  EXPECT_EQ((*cnn)(Tensor::zeros({2, 3, 16, 14}, DType::f32)).shape(), (Shape{2, 5}));
  auto mlp = make_mlp({.input = {4}, .classes = 3});
  EXPECT_EQ((*mlp)(Tensor::zeros({6, 4}, DType::f32)).shape(), (Shape{6, 3}));
  EXPECT_EQ((*make_cnn({.input = {1, kCnnMinSide, kCnnMinSide}, .classes = 2}))(Tensor::zeros({1, 1, 10, 10}, DType::f32)).shape(),
            (Shape{1, 2}));
}

TEST(Models, TheCnnRefusesTablesAndImagesTooSmall) {
  EXPECT_EQ(message_of<ValueError>([] { make_cnn({.input = {4}, .classes = 3}); }),
            "cnn: takes images [C, H, W] at least 10x10 (its two 3x3 convolutions and 2x2 poolings), got [4] (table "
            "rows: train the mlp on them)");
  EXPECT_EQ(message_of<ValueError>([] { make_cnn({.input = {1, 9, 30}, .classes = 3}); }),
            "cnn: takes images [C, H, W] at least 10x10 (its two 3x3 convolutions and 2x2 poolings), got [1, 9, 30]");
  EXPECT_EQ(message_of<ValueError>([] { make_mlp({.input = {4}, .classes = 1}); }),
            "classifier: expected at least 2 classes, got 1");
}

}  // namespace
}  // namespace weft::nn
