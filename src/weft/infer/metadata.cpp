#include "weft/infer/metadata.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "weft/core/program.h"
#include "weft/data/paths.h"
#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"
#include "weft/io/safetensors.h"
#include "weft/io/sharded_checkpoint.h"
#include "weft/nn/model_kind.h"

namespace weft::infer {

namespace {

namespace fs = std::filesystem;

constexpr const char* kDatasetKey = "weft.dataset";
constexpr const char* kNormalizationKey = "weft.normalization";
constexpr const char* kClassDistributionKey = "weft.class_distribution";
constexpr std::string_view kGpt2Identity = "gpt2-bpe:";
constexpr const char* kClassesKey = "weft.classes";
constexpr const char* kInputShapeKey = "weft.input_shape";
constexpr const char* kTableKey = "weft.table";

// The largest sample a saved shape may describe: what a model built from it could allocate.
constexpr int64_t kMaxSampleElements = int64_t{1} << 28;

std::vector<std::string> string_list(const nlohmann::json& values, const std::string& where) {
  std::vector<std::string> out;
  if (values.is_array())
    for (const nlohmann::json& v : values)
      if (v.is_string()) out.push_back(v.get<std::string>());
  WEFT_CHECK(values.is_array() && out.size() == values.size(), FormatError, where, ": must be an array of strings, found ",
             io::json_excerpt(values));
  return out;
}

std::vector<float> finite_list(const nlohmann::json& values, const std::string& where) {
  std::vector<float> out;
  for (const nlohmann::json& v : values.is_array() ? values : nlohmann::json::array({nullptr})) {
    const bool finite = v.is_number() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) < 1e30;
    WEFT_CHECK(finite, FormatError, where, ": must be an array of finite numbers, found ", io::json_excerpt(values));
    out.push_back(v.get<float>());
  }
  return out;
}

void check_normalization(const data::Normalization& n, const std::string& what) {
  WEFT_CHECK(!n.mean.empty() && n.mean.size() == n.std.size(), ValueError, what,
             ": expected one mean and one std per channel, found ", n.mean.size(), " means and ", n.std.size(), " stds");
  for (float s : n.std) WEFT_CHECK(s > 0, ValueError, what, ": expected positive stds, found ", s);
}

std::string tokenizer_file(const std::string& dir) { return (fs::path(dir) / "tokenizer.model").string(); }

// A config read from a file is checked against the tensors in the same file before a model is
// built from it: a count that disagrees would otherwise build (and allocate) a model the file
// cannot fill, and an absurd one would exhaust memory before any tensor was compared.
// A quantized GPT's file holds its projections packed with their scales, so only a bound can be
// checked here (every parameter takes at least half a byte, int4's nibble); its tensors are
// checked one by one against the model once it is built (check_fit).
void check_against_tensors(const nn::GPTConfig& config, const io::SafetensorsHeader& header, const std::string& file) {
  int64_t in_file = 0;
  uint64_t bytes = 0;
  for (const io::TensorInfo& tensor : header.tensors) {
    in_file += numel(tensor.shape);
    bytes += tensor.end - tensor.begin;
  }
  const int64_t implied = config.num_parameters();
  const bool quantized = header.metadata.contains("weft.quantization");
  WEFT_CHECK(quantized ? static_cast<uint64_t>(implied) <= 2 * bytes : implied == in_file, FormatError, file,
             ": weft.gpt describes a GPT of ", implied, " parameters (", config.layers, " layers, dim ", config.dim,
             ", context ", config.context, ", vocab ", config.vocab, ") but the file holds ",
             quantized ? str(bytes, " bytes of quantized tensors") : std::to_string(in_file),
             "; the metadata does not belong to these weights");
  // The model is built in f32 before the weights are copied in.
  const uint64_t memory = io::usable_memory_bytes();
  WEFT_CHECK(static_cast<uint64_t>(implied) <= memory / sizeof(float), OutOfMemoryError, file, ": its GPT of ",
             implied, " parameters needs ", static_cast<uint64_t>(implied) * sizeof(float),
             " bytes in f32, more than this machine's ", memory, " bytes of memory");
}

}  // namespace

std::string model_file(const std::string& path) {
  if (!io::is_directory(path)) return path;
  const std::string current = io::current_checkpoint(path);
  const std::string merged = io::consolidated_file(path);
  WEFT_CHECK(!io::is_sharded_checkpoint(current), ValueError, path, " is a sharded checkpoint, one shard per rank; "
             "merge it into one file with ", io::consolidate_command(path), " and pass ", shell_quote(merged));
  return (fs::path(current) / "model.safetensors").string();
}

ImageDatasetInfo image_dataset_info(const std::string& name) {
  // Here default_dir is the directory's name under the data root, which the environment may
  // change between calls (data/paths.h).
  static const ImageDatasetInfo kDatasets[] = {
      {"fashion-mnist",
       data::kFashionMnistNormalization,
       {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"},
       {1, 28, 28},
       "fashion-mnist"},  // Debian's dataset-fashion-mnist
      {"mnist", data::kMnistNormalization, {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, {1, 28, 28}, ""}};
  for (ImageDatasetInfo d : kDatasets)
    if (d.name == name) {
      if (!d.default_dir.empty()) d.default_dir = data::default_dataset_dir(d.default_dir);
      return d;
    }
  throw ValueError(str("unknown dataset '", name, "': expected fashion-mnist or mnist"));
}

std::string image_data_dir(const std::string& dataset, const std::string& data_dir) {
  if (!data_dir.empty()) return data_dir;
  const std::string dir = image_dataset_info(dataset).default_dir;
  WEFT_CHECK(!dir.empty(), ValueError, "--dataset ", dataset, ": needs --data-dir, the directory of its IDX files ",
             "(train-images-idx3-ubyte and the rest, .gz or not): no Debian package installs ", dataset);
  return dir;
}

Metadata classifier_metadata(const std::string& dataset) {
  return classifier_metadata(dataset, image_dataset_info(dataset).normalization);
}

Metadata classifier_metadata(const std::string& dataset, const data::Normalization& normalization) {
  image_dataset_info(dataset);
  check_normalization(normalization, "classifier_metadata");
  return {{kDatasetKey, dataset},
          {kNormalizationKey, nlohmann::json{{"mean", normalization.mean}, {"std", normalization.std}}.dump()}};
}

Metadata image_folder_metadata(const std::vector<std::string>& classes, const Shape& sample,
                               const data::Normalization& normalization) {
  check_normalization(normalization, "image_folder_metadata");
  WEFT_CHECK(sample.size() == 3 && std::ssize(normalization.mean) == sample[0], ValueError, "image_folder_metadata: ",
             "expected a sample [C, H, W] of ", normalization.mean.size(), " channels, got ", shape_str(sample));
  return {{kDatasetKey, kImageFolderDataset},
          {kClassesKey, nlohmann::json(classes).dump()},
          {kInputShapeKey, nlohmann::json(sample).dump()},
          {kNormalizationKey, nlohmann::json{{"mean", normalization.mean}, {"std", normalization.std}}.dump()}};
}

Metadata table_metadata(const TableSchema& table) {
  const data::Standardization& s = table.standardization;
  WEFT_CHECK(s.mean.size() == table.features.size() && s.std.size() == table.features.size(), ValueError,
             "table_metadata: expected one mean and one std per feature (", table.features.size(), "), found ",
             s.mean.size(), " and ", s.std.size());
  return {{kDatasetKey, kTableDataset},
          {kClassesKey, nlohmann::json(table.classes).dump()},
          {kInputShapeKey, nlohmann::json(Shape{static_cast<int64_t>(table.features.size())}).dump()},
          {kTableKey, nlohmann::json{{"label", table.label}, {"features", table.features}, {"mean", s.mean},
                                     {"std", s.std}}.dump()}};
}

std::optional<TableSchema> saved_table(const Metadata& metadata, const std::string& file) {
  auto it = metadata.find(kTableKey);
  if (it == metadata.end()) return std::nullopt;
  const std::string where = str(file, ": ", kTableKey);
  const nlohmann::json j = io::parse_json(it->second, where);
  TableSchema table;
  const nlohmann::json& label = io::json_field(j, "label", where);
  WEFT_CHECK(label.is_string(), FormatError, where, ": \"label\" must be a string, found ", io::json_excerpt(label));
  table.label = label.get<std::string>();
  table.features = string_list(io::json_field(j, "features", where), where + " \"features\"");
  table.standardization.mean = finite_list(io::json_field(j, "mean", where), where + " \"mean\"");
  table.standardization.std = finite_list(io::json_field(j, "std", where), where + " \"std\"");
  const size_t features = table.features.size();
  WEFT_CHECK(features > 0 && table.standardization.mean.size() == features && table.standardization.std.size() == features,
             FormatError, where, ": expected a mean and a std for each of its ", features, " features");
  for (float s : table.standardization.std)
    WEFT_CHECK(s > 0, FormatError, where, ": \"std\" must be positive, found ", s);
  std::optional<std::vector<std::string>> classes = saved_classes(metadata, file);
  WEFT_CHECK(classes.has_value(), FormatError, file, ": ", kTableKey, " without ", kClassesKey);
  table.classes = *classes;
  return table;
}

std::optional<std::vector<std::string>> saved_classes(const Metadata& metadata, const std::string& file) {
  auto it = metadata.find(kClassesKey);
  if (it == metadata.end()) return std::nullopt;
  const std::string where = str(file, ": ", kClassesKey);
  std::vector<std::string> classes = string_list(io::parse_json(it->second, where), where);
  WEFT_CHECK(classes.size() >= 2, FormatError, where, ": expected at least two class names, found ", classes.size());
  return classes;
}

nn::ClassifierShape saved_classifier_shape(const Metadata& metadata, const std::string& file) {
  auto it = metadata.find(kInputShapeKey);
  if (it == metadata.end()) return {};
  const std::string where = str(file, ": ", kInputShapeKey);
  const nlohmann::json j = io::parse_json(it->second, where);
  nn::ClassifierShape shape;
  shape.input.clear();
  if (j.is_array() && (j.size() == 1 || j.size() == 3))
    for (const nlohmann::json& size : j)
      if (size.is_number_integer() && size.get<int64_t>() >= 1 && size.get<int64_t>() <= kMaxSampleElements)
        shape.input.push_back(size.get<int64_t>());
  WEFT_CHECK(!shape.input.empty() && shape.input.size() == j.size() && numel(shape.input) <= kMaxSampleElements, FormatError, where,
             ": must be [C, H, W] or [F], positive sizes of at most ", kMaxSampleElements, " elements in all, found ",
             io::json_excerpt(j));
  std::optional<std::vector<std::string>> classes = saved_classes(metadata, file);
  WEFT_CHECK(classes.has_value(), FormatError, file, ": ", kInputShapeKey, " without ", kClassesKey);
  shape.classes = std::ssize(*classes);
  return shape;
}

Metadata class_distribution_metadata(const Tensor& labels, int64_t classes) {
  std::vector<int64_t> counts(static_cast<size_t>(classes), 0);
  const std::vector<int64_t> ids = labels.contiguous().to_vector<int64_t>();
  for (int64_t id : ids) {
    WEFT_CHECK(id >= 0 && id < classes, IndexError, "class_distribution_metadata: label ", id, " outside 0..",
               classes - 1);
    ++counts[static_cast<size_t>(id)];
  }
  std::vector<double> fractions;
  for (int64_t count : counts) fractions.push_back(static_cast<double>(count) / static_cast<double>(ids.size()));
  return class_distribution_metadata(fractions);
}

Metadata class_distribution_metadata(const std::vector<double>& fractions) {
  return {{kClassDistributionKey, nlohmann::json(fractions).dump()}};
}

std::optional<std::vector<double>> saved_class_distribution(const Metadata& metadata, int64_t classes,
                                                             const std::string& file) {
  auto it = metadata.find(kClassDistributionKey);
  if (it == metadata.end()) return std::nullopt;
  const std::string where = str(file, ": ", kClassDistributionKey);
  const nlohmann::json j = io::parse_json(it->second, where);
  std::vector<double> fractions;
  if (j.is_array() && static_cast<int64_t>(j.size()) == classes)
    for (const nlohmann::json& p : j)
      if (p.is_number() && p.get<double>() >= 0 && p.get<double>() <= 1) fractions.push_back(p.get<double>());
  WEFT_CHECK(static_cast<int64_t>(fractions.size()) == classes, FormatError, where, ": must be ", classes,
             " fractions from 0 to 1, found ", io::json_excerpt(j));
  return fractions;
}

std::optional<data::Normalization> saved_normalization(const Metadata& metadata, const std::string& file) {
  auto it = metadata.find(kNormalizationKey);
  if (it == metadata.end()) return std::nullopt;
  const std::string where = str(file, ": ", kNormalizationKey);
  const nlohmann::json j = io::parse_json(it->second, where);
  auto channels = [&](const char* key) {
    const nlohmann::json& values = io::json_field(j, key, where);
    std::vector<float> out;
    for (const nlohmann::json& v : values.is_array() ? values : nlohmann::json::array({nullptr})) {
      const bool finite = v.is_number() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) < 1e30;
      WEFT_CHECK(finite, FormatError, where, ": \"", key, "\" must be an array of finite numbers, found ",
                 io::json_excerpt(values));
      out.push_back(v.get<float>());
    }
    return out;
  };
  data::Normalization n{.mean = channels("mean"), .std = channels("std")};
  try {
    check_normalization(n, where);
  } catch (const ValueError& e) {
    throw FormatError(e.what());
  }
  return n;
}

Metadata gpt_metadata(const nn::GPTConfig& c, const data::Tokenizer& tokenizer) {
  nlohmann::json config = {{"layers", c.layers}, {"heads", c.heads}, {"dim", c.dim},
                           {"context", c.context}, {"vocab", c.vocab}, {"dropout", c.dropout}};
  return {{"weft.gpt", config.dump()}, {"weft.tokenizer", tokenizer.identity()}};
}

SavedGPT read_saved_gpt(const std::string& path) {
  // A sharded checkpoint (ZeRO) says the same in its index.
  const std::string current = io::is_directory(path) ? io::current_checkpoint(path) : std::string();
  const bool sharded = !current.empty() && io::is_sharded_checkpoint(current);
  const std::string file = sharded ? (fs::path(current) / io::kShardIndex).string() : model_file(path);
  io::SafetensorsHeader header = sharded ? io::sharded_header(current) : io::read_safetensors_header(file);
  auto model = header.metadata.find("weft.model");
  if (model == header.metadata.end() || nn::find_model_kind(model->second) != nn::ModelKind::gpt)
    throw ValueError(str(file, " does not hold a GPT (its weft.model is '",
                         model == header.metadata.end() ? "" : model->second, "')"));
  SavedGPT saved;
  // The directory the weights were read from: DIR/model.safetensors is a symlink into the current
  // step directory, where the tokenizer saved with those weights sits.
  std::error_code error;
  const fs::path target = fs::read_symlink(file, error);
  const fs::path read = error ? fs::path(file) : fs::path(file).parent_path() / target;
  saved.dir = read.parent_path().string();

  auto value = [&](const char* key) -> const std::string& {
    auto it = header.metadata.find(key);
    WEFT_CHECK(it != header.metadata.end(), FormatError, file, ": no ", key, " in its metadata; a GPT checkpoint ",
               "weft wrote has weft.gpt and weft.tokenizer");
    return it->second;
  };
  // Each size below 2^31 (token ids are 32-bit), at most nn::kMaxGptLayers blocks, heads dividing
  // the width: what GPTConfig::check asks of flags, said of the file's fields. Then the count of
  // parameters they imply must be the file's.
  const std::string where = str(file, ": weft.gpt");
  const nlohmann::json c = io::parse_json(value("weft.gpt"), where);
  constexpr int64_t kMaxSize = INT32_MAX;
  saved.config = {.layers = io::json_integer(c, "layers", where, 1, nn::kMaxGptLayers),
                  .heads = io::json_integer(c, "heads", where, 1, kMaxSize),
                  .dim = io::json_integer(c, "dim", where, 1, kMaxSize),
                  .context = io::json_integer(c, "context", where, 1, kMaxSize),
                  .vocab = io::json_integer(c, "vocab", where, 1, kMaxSize),
                  .dropout = io::json_number(c, "dropout", where, 0, std::nextafter(1.0, 0.0))};
  WEFT_CHECK(saved.config.dim % saved.config.heads == 0, FormatError, where, ": \"dim\" ", saved.config.dim,
             " must be a multiple of \"heads\" ", saved.config.heads, "; the file is corrupt or not what it claims");
  saved.tokenizer = value("weft.tokenizer");
  check_against_tensors(saved.config, header, file);
  return saved;
}

std::unique_ptr<data::Tokenizer> tokenizer_for(const SavedGPT& saved, const std::string& spec) {
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!spec.empty()) {
    tokenizer = data::load_tokenizer(spec);
  } else if (saved.tokenizer == "byte") {
    tokenizer = std::make_unique<data::ByteTokenizer>();
  } else if (saved.tokenizer.starts_with(kGpt2Identity)) {
    const fs::path vocab = fs::path(saved.dir) / data::Gpt2Tokenizer::kVocabFile;
    const fs::path merges = fs::path(saved.dir) / data::Gpt2Tokenizer::kMergesFile;
    std::error_code error;
    WEFT_CHECK(fs::exists(vocab, error) && fs::exists(merges, error), IOError, "the model in ", saved.dir,
               " was trained with tokenizer ", saved.tokenizer, ", and ", fs::exists(vocab, error) ? merges : vocab,
               " is missing; pass the directory of that tokenizer's vocab.json and merges.txt with --tokenizer");
    tokenizer = std::make_unique<data::Gpt2Tokenizer>(data::Gpt2Tokenizer::load(saved.dir));
  } else {
    const std::string path = tokenizer_file(saved.dir);
    std::error_code error;
    WEFT_CHECK(fs::exists(path, error), IOError, "the model in ", saved.dir, " was trained with tokenizer ", saved.tokenizer,
               ", and ", path, " is missing; pass that tokenizer's model file with --tokenizer");
    tokenizer = data::load_tokenizer(path);
  }
  WEFT_CHECK(tokenizer->identity() == saved.tokenizer, ValueError, "tokenizer ", spec.empty() ? "file" : spec, " (",
             tokenizer->identity(), ") does not match the checkpoint in ", saved.dir, ", trained with ",
             saved.tokenizer, spec.empty() ? " (put that tokenizer's model file back, or pass it with --tokenizer)"
                                           : " (leave --tokenizer out to use the checkpoint's)");
  return tokenizer;
}

void save_tokenizer(const data::Tokenizer& tokenizer, const std::string& dir) {
  auto write = [](const std::string& path, const std::string& bytes) {
    io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
  };
  if (auto* gpt2 = dynamic_cast<const data::Gpt2Tokenizer*>(&tokenizer)) {
    write((fs::path(dir) / data::Gpt2Tokenizer::kVocabFile).string(), gpt2->vocab_json());
    write((fs::path(dir) / data::Gpt2Tokenizer::kMergesFile).string(), gpt2->merges_txt());
    return;
  }
  auto* sentencepiece = dynamic_cast<const data::SentencePieceTokenizer*>(&tokenizer);
  if (!sentencepiece) return;
  write(tokenizer_file(dir), sentencepiece->serialized_model());
}

}  // namespace weft::infer
