// Tables: a CSV file of samples, one row each, for a classifier of feature vectors.
//
// The format read: the first line is a header of column names (unique); every later line a row
// of as many comma-separated fields. A field may be quoted ("a, b", with "" for a quote) but not
// span lines; spaces around a field are ignored; blank lines are skipped; line endings are \n or
// \r\n. One column is the label, any text: its distinct values, sorted, are the classes (integers
// are sorted as numbers, so labels 0..K-1 keep their ids), at least two. Every other column is a
// feature and must hold finite decimal numbers.
//
// Refused, one error naming the file (and the line and column where there is one): a missing or
// unreadable file, or one larger than io::usable_memory_bytes() (IOError); an empty file, a
// header without data rows, a row with another number of fields than the header, a field that
// is not a number, a missing label column, duplicate column names, a quote left open, a single
// class (FormatError, or ValueError for a label column the caller named that is not there).
//
// TableDataset keeps the features as f32 [N, F] and standardises per batch with the training
// split's statistics (the same ones saved with the model): inputs (x - mean[f]) / std[f].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/data/dataset.h"

namespace weft::data {

struct Table {
  std::vector<std::string> features;  // feature column names, in the file's order
  std::string label;                  // the label column's name
  std::vector<std::string> classes;   // class names by id
  Tensor values;                      // f32 [N, F]
  Tensor labels;                      // i64 [N]
};

struct TableColumns {
  std::string label;                  // "": the last column
  // A model's own, when reading data for a trained model: the features are these columns in this
  // order (others are ignored; a missing one is a FormatError) and the labels must be among
  // `classes` (FormatError naming the line otherwise). Empty: every column but the label, and
  // the classes found.
  std::vector<std::string> features;
  std::vector<std::string> classes;
};

Table read_csv_table(const std::string& path, const TableColumns& columns = {});

// Per-feature mean and standard deviation (population) of f32 [N, F]; a constant feature gets
// std 1, so that standardising it only centres it.
struct Standardization {
  std::vector<float> mean, std;
};
Standardization measure_standardization(const Tensor& values);

class TableDataset : public Dataset {
 public:
  // values f32 [N, F], labels i64 [N], F positive stds: ShapeError / DTypeError / ValueError otherwise.
  TableDataset(Tensor values, Tensor labels, const Standardization& standardization);
  int64_t size() const override { return labels_.size(0); }
  // inputs f32 [B, F] standardised, targets i64 [B].
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& labels() const { return labels_; }

 private:
  Tensor values_, labels_;
  Standardization standardization_;
};

}  // namespace weft::data
