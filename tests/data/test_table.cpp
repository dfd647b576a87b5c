// CSV tables: parsing, labels to classes, standardisation, and every malformed table's message.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/data/table.h"

namespace weft::data {
namespace {

using weft::testing::message_of;
using weft::testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name), std::ios::binary) << text;
  return dir.file(name);
}

TEST(Table, ReadsFeaturesAndStringLabelsAsSortedClasses) {
  TempDir dir;
  const std::string path = write(dir, "t.csv",
                                 "width, height ,kind\r\n"
                                 "1.5,2,dog\r\n"
                                 "\r\n"
                                 "-3e1, \"4\" ,cat\r\n"
                                 "+0.25,6,\"bird, small\"\n");
  const Table t = read_csv_table(path);
  EXPECT_EQ(t.features, (std::vector<std::string>{"width", "height"}));
  EXPECT_EQ(t.label, "kind");
  EXPECT_EQ(t.classes, (std::vector<std::string>{"bird, small", "cat", "dog"}));
  EXPECT_EQ(t.values.to_vector<float>(), (std::vector<float>{1.5f, 2, -30, 4, 0.25f, 6}));
  EXPECT_EQ(t.labels.to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 0}));
}

TEST(Table, IntegerLabelsSortAsNumbersAndTheLabelColumnMayBeNamed) {
  TempDir dir;
  const std::string path = write(dir, "t.csv", "y,a,b\n10,1,2\n2,3,4\n0,5,6\n2,7,8\n");
  const Table t = read_csv_table(path, {.label = "y", .features = {}, .classes = {}});
  EXPECT_EQ(t.classes, (std::vector<std::string>{"0", "2", "10"}));
  EXPECT_EQ(t.labels.to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 0, 1}));
  EXPECT_EQ(t.features, (std::vector<std::string>{"a", "b"}));
  // A model's columns, in its order, and its classes.
  const Table model = read_csv_table(path, {.label = "y", .features = {"b", "a"}, .classes = {"0", "2", "5", "10"}});
  EXPECT_EQ(model.values.to_vector<float>(), (std::vector<float>{2, 1, 4, 3, 6, 5, 8, 7}));
  EXPECT_EQ(model.labels.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 0, 1}));
}

TEST(Table, StandardisationUsesTheGivenStatistics) {
  const Tensor values = Tensor::from_vector<float>({1, 10, 3, 10, 5, 10}, {3, 2});
  const Standardization s = measure_standardization(values);
  EXPECT_FLOAT_EQ(s.mean[0], 3);
  EXPECT_FLOAT_EQ(s.std[0], std::sqrt(8.0f / 3));
  EXPECT_FLOAT_EQ(s.mean[1], 10);
  EXPECT_FLOAT_EQ(s.std[1], 1);  // constant: centred only
  const TableDataset data(values, Tensor::from_vector<int64_t>({0, 1, 0}, {3}), s);
  const Batch batch = data.get_batch({2, 0});
  const std::vector<float> inputs = batch.inputs.to_vector<float>();
  EXPECT_FLOAT_EQ(inputs[0], 2 / std::sqrt(8.0f / 3));
  EXPECT_FLOAT_EQ(inputs[1], 0);
  EXPECT_FLOAT_EQ(inputs[2], -2 / std::sqrt(8.0f / 3));
  EXPECT_EQ(batch.targets.to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
}

TEST(Table, BadTablesNameTheFileLineAndColumn) {
  TempDir dir;
  const auto error = [&](const std::string& text) {
    const std::string path = write(dir, "bad.csv", text);
    try {
      read_csv_table(path);
    } catch (const Error& e) {
      return std::string(e.what()).substr(path.size());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(""), ": empty; expected a header row of column names, then a row per sample");
  EXPECT_EQ(error("\n \n"), ": empty; expected a header row of column names, then a row per sample");
  EXPECT_EQ(error("a,b,label\n"), ": a header and no data rows");
  EXPECT_EQ(error("a,b,label\n1,2,x\n3,4\n"), ":3: 2 fields, but the header has 3 columns");
  EXPECT_EQ(error("a,b,label\n1,2,x\n3,4,y,5\n"), ":3: 4 fields, but the header has 3 columns");
  EXPECT_EQ(error("a,b,label\n1,2,x\n\n3,four,y\n"), ":4: column 'b': 'four' is not a finite number (features are numeric)");
  EXPECT_EQ(error("a,b,label\n1,,x\n"), ":2: column 'b': '' is not a finite number (features are numeric)");
  EXPECT_EQ(error("a,b,label\nnan,1,x\n"), ":2: column 'a': 'nan' is not a finite number (features are numeric)");
  EXPECT_EQ(error("a,b,label\n1,2,x\n3,4,x\n"), ": the label column 'label' holds one class ('x'); a classifier needs at least two");
  EXPECT_EQ(error("a,a,label\n1,2,x\n"), ":1: the header names a column twice ('a', 'a', 'label')");
  EXPECT_EQ(error("label\nx\n"), ":1: the header has 1 column; expected feature columns and a label column");
  EXPECT_EQ(error("a,b,label\n1,2,\"x\n"), ":2: a quoted field is not closed on its line");
  const std::string path = write(dir, "t.csv", "a,b,label\n1,2,x\n3,4,y\n");
  EXPECT_EQ(message_of<ValueError>([&] { read_csv_table(path, {.label = "species", .features = {}, .classes = {}}); }),
            path + ": no label column 'species'; its columns are 'a', 'b', 'label'");
  EXPECT_EQ(message_of<FormatError>([&] { read_csv_table(path, {.label = "label", .features = {"a", "c"}, .classes = {"x", "y"}}); }),
            path + ": no column 'c', a feature of the model");
  EXPECT_EQ(message_of<FormatError>([&] { read_csv_table(path, {.label = "label", .features = {"a"}, .classes = {"x", "z"}}); }),
            path + ":3: label 'y' is not one of the model's classes ('x', 'z')");
}

}  // namespace
}  // namespace weft::data
