#include "weft/data/table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "weft/io/input_file.h"

namespace weft::data {

namespace {

std::string_view trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// One line's fields; `where` ("FILE:LINE") for the error of a quote left open.
std::vector<std::string> split_fields(std::string_view line, const std::string& where) {
  std::vector<std::string> fields;
  size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::string field;
    if (i < line.size() && line[i] == '"') {
      size_t j = i + 1;
      for (;; ++j) {
        WEFT_CHECK(j < line.size(), FormatError, where, ": a quoted field is not closed on its line");
        if (line[j] != '"') {
          field += line[j];
        } else if (j + 1 < line.size() && line[j + 1] == '"') {
          field += '"';
          ++j;
        } else {
          break;
        }
      }
      const size_t comma = line.find(',', j + 1);
      WEFT_CHECK(trim(line.substr(j + 1, comma == std::string_view::npos ? std::string_view::npos : comma - j - 1)).empty(),
                 FormatError, where, ": text after the closing quote of field ", fields.size() + 1);
      fields.push_back(field);
      if (comma == std::string_view::npos) return fields;
      i = comma + 1;
    } else {
      const size_t comma = line.find(',', i);
      fields.emplace_back(trim(line.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i)));
      if (comma == std::string_view::npos) return fields;
      i = comma + 1;
    }
  }
}

std::optional<double> parse_number(const std::string& text) {
  double value = 0;
  const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
  const auto [end, error] = std::from_chars(begin, text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_integer(const std::string& text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& name : names) list += str(list.empty() ? "" : ", ", "'", name, "'");
  return list;
}

}  // namespace

Table read_csv_table(const std::string& path, const TableColumns& columns) {
  const uint64_t memory = io::usable_memory_bytes();
  const std::string content = io::read_input(path, memory);
  // Lines, numbered from 1, without their ending; blank ones left out.
  std::vector<std::pair<int64_t, std::string_view>> lines;
  int64_t number = 0;
  for (size_t begin = 0; begin < content.size();) {
    size_t end = content.find('\n', begin);
    if (end == std::string::npos) end = content.size();
    std::string_view line(content.data() + begin, end - begin);
    if (line.ends_with('\r')) line.remove_suffix(1);
    ++number;
    if (!trim(line).empty()) lines.emplace_back(number, line);
    begin = end + 1;
  }
  WEFT_CHECK(!lines.empty(), FormatError, path, ": empty; expected a header row of column names, then a row per sample");
  const auto where = [&](int64_t line) { return str(path, ":", line); };
  const std::vector<std::string> header = split_fields(lines[0].second, where(lines[0].first));
  WEFT_CHECK(std::set<std::string>(header.begin(), header.end()).size() == header.size(), FormatError,
             where(lines[0].first), ": the header names a column twice (", quoted_list(header), ")");
  WEFT_CHECK(header.size() >= 2, FormatError, where(lines[0].first), ": the header has ", header.size(),
             " column; expected feature columns and a label column");
  WEFT_CHECK(lines.size() >= 2, FormatError, path, ": a header and no data rows");

  const auto column_of = [&](const std::string& name) -> int64_t {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : it - header.begin();
  };
  Table table;
  table.label = columns.label.empty() ? header.back() : columns.label;
  const int64_t label_column = column_of(table.label);
  WEFT_CHECK(label_column >= 0, ValueError, path, ": no label column '", table.label, "'; its columns are ",
             quoted_list(header));
  std::vector<int64_t> feature_columns;
  if (columns.features.empty()) {
    for (size_t c = 0; c < header.size(); ++c)
      if (static_cast<int64_t>(c) != label_column) {
        table.features.push_back(header[c]);
        feature_columns.push_back(static_cast<int64_t>(c));
      }
  } else {
    table.features = columns.features;
    for (const std::string& name : columns.features) {
      feature_columns.push_back(column_of(name));
      WEFT_CHECK(feature_columns.back() >= 0, FormatError, path, ": no column '", name, "', a feature of the model");
    }
  }

  const int64_t rows = static_cast<int64_t>(lines.size()) - 1, features = static_cast<int64_t>(feature_columns.size());
  const uint64_t bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(features + 2) * sizeof(float);
  if (bytes > memory - content.size())
    throw OutOfMemoryError(str(path, ": its ", rows, " rows of ", features, " features would take ", bytes,
                               " bytes, more than the memory this process may use (", memory, " bytes)"),
                           static_cast<int64_t>(bytes));
  std::vector<float> values;
  values.reserve(static_cast<size_t>(rows * features));
  std::vector<std::string> label_text;
  std::vector<int64_t> label_lines;
  for (size_t r = 1; r < lines.size(); ++r) {
    const auto& [line, text] = lines[r];
    const std::vector<std::string> fields = split_fields(text, where(line));
    WEFT_CHECK(fields.size() == header.size(), FormatError, where(line), ": ", fields.size(),
               fields.size() == 1 ? " field" : " fields", ", but the header has ", header.size(), " columns");
    for (int64_t c : feature_columns) {
      const std::string& field = fields[static_cast<size_t>(c)];
      const std::optional<double> value = parse_number(field);
      WEFT_CHECK(value && std::abs(*value) <= 3.4e38, FormatError, where(line), ": column '",
                 header[static_cast<size_t>(c)], "': '", field, "' is not a finite number (features are numeric)");
      values.push_back(static_cast<float>(*value));
    }
    label_text.push_back(fields[static_cast<size_t>(label_column)]);
    label_lines.push_back(line);
  }

  if (columns.classes.empty()) {
    std::set<std::string> distinct(label_text.begin(), label_text.end());
    table.classes.assign(distinct.begin(), distinct.end());
    const bool integers = std::all_of(table.classes.begin(), table.classes.end(),
                                      [](const std::string& c) { return parse_integer(c).has_value(); });
    if (integers)
      std::sort(table.classes.begin(), table.classes.end(),
                [](const std::string& a, const std::string& b) { return *parse_integer(a) < *parse_integer(b); });
    WEFT_CHECK(table.classes.size() >= 2, FormatError, path, ": the label column '", table.label, "' holds one class ('",
               table.classes[0], "'); a classifier needs at least two");
  } else {
    table.classes = columns.classes;
  }
  std::map<std::string, int64_t> ids;
  for (size_t c = 0; c < table.classes.size(); ++c) ids[table.classes[c]] = static_cast<int64_t>(c);
  std::vector<int64_t> labels;
  for (size_t r = 0; r < label_text.size(); ++r) {
    const auto it = ids.find(label_text[r]);
    WEFT_CHECK(it != ids.end(), FormatError, where(label_lines[r]), ": label '", label_text[r],
               "' is not one of the model's classes (", quoted_list(table.classes), ")");
    labels.push_back(it->second);
  }
  table.values = Tensor::from_vector(values, {rows, features});
  table.labels = Tensor::from_vector(labels, {rows});
  return table;
}

Standardization measure_standardization(const Tensor& values) {
  WEFT_CHECK(values.dtype() == DType::f32 && values.dim() == 2, ValueError, "measure_standardization: expected f32 "
             "[N, F], found ", values.dtype(), " ", shape_str(values.shape()));
  const Tensor source = values.contiguous_untracked();
  const int64_t n = values.size(0), features = values.size(1);
  const float* x = source.data<float>();
  Standardization s;
  for (int64_t f = 0; f < features; ++f) {
    // Two passes in double: the mean, then the squared deviations from it.
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i * features + f];
    const double mean = sum / static_cast<double>(n);
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) squares += (x[i * features + f] - mean) * (x[i * features + f] - mean);
    const double std = std::sqrt(squares / static_cast<double>(n));
    s.mean.push_back(static_cast<float>(mean));
    s.std.push_back(std > 0 ? static_cast<float>(std) : 1.0f);
  }
  return s;
}

TableDataset::TableDataset(Tensor values, Tensor labels, const Standardization& standardization)
    : values_(values.contiguous_untracked()), labels_(labels.contiguous_untracked()), standardization_(standardization) {
  WEFT_CHECK(values_.dtype() == DType::f32 && labels_.dtype() == DType::i64, DTypeError,
             "TableDataset: expected f32 values and i64 labels, found ", values_.dtype(), " and ", labels_.dtype());
  WEFT_CHECK(values_.dim() == 2 && labels_.dim() == 1 && labels_.size(0) == values_.size(0), ShapeError,
             "TableDataset: expected values [N, F] and labels [N], found ", shape_str(values_.shape()), " and ",
             shape_str(labels_.shape()));
  const size_t features = static_cast<size_t>(values_.size(1));
  WEFT_CHECK(standardization.mean.size() == features && standardization.std.size() == features, ValueError,
             "TableDataset: expected ", features, " means and stds (one per feature), found ",
             standardization.mean.size(), " and ", standardization.std.size());
  for (float s : standardization.std)
    WEFT_CHECK(s > 0 && std::isfinite(s), ValueError, "TableDataset: expected positive stds, found ", s);
}

Batch TableDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t batch = static_cast<int64_t>(indices.size()), features = values_.size(1);
  Batch out{Tensor::empty({batch, features}, DType::f32), Tensor::empty({batch}, DType::i64)};
  const float* values = values_.data<float>();
  const int64_t* labels = labels_.data<int64_t>();
  float* inputs = out.inputs.data<float>();
  int64_t* targets = out.targets.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t k = indices[static_cast<size_t>(i)];
    WEFT_CHECK(k >= 0 && k < size(), IndexError, "TableDataset: index ", k, " is outside [0, ", size(), ")");
    targets[i] = labels[k];
    for (int64_t f = 0; f < features; ++f)
      inputs[i * features + f] = (values[k * features + f] - standardization_.mean[static_cast<size_t>(f)]) /
                                 standardization_.std[static_cast<size_t>(f)];
  }
  return out;
}

}  // namespace weft::data
