#include "weft/infer/metadata.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"

namespace weft::infer {

namespace {

namespace fs = std::filesystem;

constexpr const char* kDatasetKey = "weft.dataset";
constexpr const char* kNormalizationKey = "weft.normalization";

void check_normalization(const data::Normalization& n, const std::string& what) {
  WEFT_CHECK(!n.mean.empty() && n.mean.size() == n.std.size(), ValueError, what,
             ": expected one mean and one std per channel, found ", n.mean.size(), " means and ", n.std.size(), " stds");
  for (float s : n.std) WEFT_CHECK(s > 0, ValueError, what, ": expected positive stds, found ", s);
}

std::string tokenizer_file(const std::string& dir) { return (fs::path(dir) / "tokenizer.model").string(); }

}  // namespace

std::string model_file(const std::string& path) {
  return fs::is_directory(path) ? (fs::path(io::current_checkpoint(path)) / "model.safetensors").string() : path;
}

const ImageDatasetInfo& image_dataset_info(const std::string& name) {
  static const ImageDatasetInfo kDatasets[] = {
      {"fashion-mnist",
       data::kFashionMnistNormalization,
       {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"},
       {1, 28, 28}},
      {"mnist", data::kMnistNormalization, {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, {1, 28, 28}}};
  for (const ImageDatasetInfo& d : kDatasets)
    if (d.name == name) return d;
  throw ValueError(str("unknown dataset '", name, "': expected fashion-mnist or mnist"));
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

std::optional<data::Normalization> saved_normalization(const Metadata& metadata, const std::string& file) {
  auto it = metadata.find(kNormalizationKey);
  if (it == metadata.end()) return std::nullopt;
  data::Normalization n;
  try {
    nlohmann::json j = nlohmann::json::parse(it->second);
    n.mean = j.at("mean").get<std::vector<float>>();
    n.std = j.at("std").get<std::vector<float>>();
    check_normalization(n, str(file, ": ", kNormalizationKey));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(str(file, ": ", kNormalizationKey, " is '", it->second,
                          "', expected {\"mean\": [...], \"std\": [...]} (", e.what(), ")"));
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
  const std::string file = model_file(path);
  io::SafetensorsHeader header = io::read_safetensors_header(file);
  auto model = header.metadata.find("weft.model");
  if (model == header.metadata.end() || model->second != "gpt")
    throw ValueError(str(file, " does not hold a GPT (its weft.model is '",
                         model == header.metadata.end() ? "" : model->second, "')"));
  SavedGPT saved;
  // The directory the weights were read from: DIR/model.safetensors is a symlink into the current
  // step directory, where the tokenizer saved with those weights sits.
  const fs::path read = fs::is_symlink(file) ? fs::path(file).parent_path() / fs::read_symlink(file) : fs::path(file);
  saved.dir = read.parent_path().string();
  try {
    nlohmann::json c = nlohmann::json::parse(header.metadata.at("weft.gpt"));
    saved.config = {.layers = c.at("layers"), .heads = c.at("heads"), .dim = c.at("dim"), .context = c.at("context"),
                    .vocab = c.at("vocab"), .dropout = c.at("dropout")};
    saved.tokenizer = header.metadata.at("weft.tokenizer");
  } catch (const std::exception& e) {
    throw FormatError(str(file, ": missing or malformed GPT metadata (weft.gpt, weft.tokenizer): ", e.what()));
  }
  try {
    saved.config.check();
  } catch (const ValueError& e) {
    throw FormatError(str(file, ": weft.gpt describes no valid GPT: ", e.what()));
  }
  return saved;
}

std::unique_ptr<data::Tokenizer> tokenizer_for(const SavedGPT& saved, const std::string& spec) {
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!spec.empty()) {
    tokenizer = data::load_tokenizer(spec);
  } else if (saved.tokenizer == "byte") {
    tokenizer = std::make_unique<data::ByteTokenizer>();
  } else {
    const std::string path = tokenizer_file(saved.dir);
    WEFT_CHECK(fs::exists(path), IOError, "the model in ", saved.dir, " was trained with tokenizer ", saved.tokenizer,
               ", and ", path, " is missing; pass that tokenizer's model file with --tokenizer");
    tokenizer = data::load_tokenizer(path);
  }
  WEFT_CHECK(tokenizer->identity() == saved.tokenizer, ValueError, "tokenizer ", spec.empty() ? "file" : spec, " (",
             tokenizer->identity(), ") does not match the checkpoint in ", saved.dir, ", trained with ",
             saved.tokenizer);
  return tokenizer;
}

void save_tokenizer(const data::Tokenizer& tokenizer, const std::string& dir) {
  auto* sentencepiece = dynamic_cast<const data::SentencePieceTokenizer*>(&tokenizer);
  if (!sentencepiece) return;
  const std::string& bytes = sentencepiece->serialized_model();
  io::write_file_atomic(tokenizer_file(dir), [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
}

}  // namespace weft::infer
