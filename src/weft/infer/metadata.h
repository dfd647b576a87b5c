// What a weft checkpoint says about its model beyond the tensors: the keys of model.safetensors'
// metadata that training writes and inference reads, written and read here only, so the two
// sides cannot drift apart.
//
//   weft.model          mlp | cnn | gpt: the architecture (nn/models.h, nn/gpt.h)
//   weft.dataset        classifiers: fashion-mnist | mnist, the data set trained on (its labels), or
//                       image-folder | table for a user's own data (weft train --data)
//   weft.normalization  image classifiers: {"mean": [m_0, ...], "std": [s_0, ...]}, one entry per
//                       channel, in units of pixel / 255: the model's input is (x / 255 - m_c) / s_c
//                       for a u8 pixel x of channel c, exactly as data::ImageDataset computes it
//   weft.classes        own data: ["cat", "dog", ...], the class names by class id
//   weft.input_shape    own data: one sample as the model takes it, [C, H, W] or [F] for a table
//   weft.table          tables: {"label": column, "features": [column, ...], "mean": [...],
//                       "std": [...]}: the model's input is (x_f - mean_f) / std_f for feature f,
//                       the columns read by name (data::TableDataset)
//   weft.class_distribution  classifiers: [p_0, ...], the fraction of the test set in each class
//                       (what a server compares its recent predictions with: drift)
//   weft.gpt            GPTs: {"layers", "heads", "dim", "context", "vocab", "dropout"}
//   weft.tokenizer      GPTs: the tokenizer's identity (data/tokenizer.h)
//   DIR/tokenizer.model GPTs trained with SentencePiece: the tokenizer itself, beside the weights
//   DIR/vocab.json, DIR/merges.txt  GPTs with GPT-2's byte-level BPE (weft import gpt2): the same
//
// Quantized classifiers (quant/checkpoint.h) add their own keys and carry weft.dataset and
// weft.normalization over from the checkpoint they were made from. Checkpoints written before
// weft.dataset and weft.normalization existed have neither; infer/load.h says what it assumes.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/shape.h"
#include "weft/core/tensor.h"
#include "weft/data/dataset.h"
#include "weft/data/table.h"
#include "weft/data/tokenizer.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"

namespace weft::infer {

using Metadata = std::map<std::string, std::string>;

// A checkpoint directory → its current checkpoint's model.safetensors (io/checkpoint_dir.h);
// anything else is taken as the file itself.
std::string model_file(const std::string& path);

// The image data sets the classifiers train on. "fashion-mnist" | "mnist"; any other name is a
// ValueError listing them.
struct ImageDatasetInfo {
  std::string name;
  data::Normalization normalization;  // the training split's statistics
  std::vector<std::string> labels;    // class names by class id
  Shape sample_shape;                 // one image as the models take it: [C, H, W]
  std::string default_dir;            // read without --data-dir (data/paths.h); "": no package ships it
};
ImageDatasetInfo image_dataset_info(const std::string& name);

// Where `dataset`'s IDX files are read: `data_dir` when given, else the data set's default_dir;
// for a data set without one, a ValueError asking for --data-dir.
std::string image_data_dir(const std::string& dataset, const std::string& data_dir);

// weft.dataset and weft.normalization for a classifier trained on `dataset`, with that data
// set's statistics or with `normalization` (which must have one mean and one positive std per
// channel: ValueError otherwise).
Metadata classifier_metadata(const std::string& dataset);
Metadata classifier_metadata(const std::string& dataset, const data::Normalization& normalization);
// weft.normalization of `metadata`, or nullopt when it has none; malformed → FormatError naming `file`.
std::optional<data::Normalization> saved_normalization(const Metadata& metadata, const std::string& file);

// A user's own data (weft train --data): weft.dataset's two values beside the built-in data sets.
inline constexpr const char* kImageFolderDataset = "image-folder";
inline constexpr const char* kTableDataset = "table";

// weft.dataset image-folder, weft.classes, weft.input_shape ([C, H, W]) and weft.normalization
// (C means and positive stds, ValueError otherwise).
Metadata image_folder_metadata(const std::vector<std::string>& classes, const Shape& sample,
                               const data::Normalization& normalization);

// A table's columns and the training split's statistics, which the model's input depends on.
struct TableSchema {
  std::string label;
  std::vector<std::string> features;
  std::vector<std::string> classes;
  data::Standardization standardization;  // one mean and one positive std per feature
};
// weft.dataset table, weft.classes, weft.input_shape ([F]) and weft.table.
Metadata table_metadata(const TableSchema& table);
// weft.table of `metadata`, or nullopt when it has none; malformed → FormatError naming `file`.
std::optional<TableSchema> saved_table(const Metadata& metadata, const std::string& file);

// What a classifier checkpoint's model takes and predicts: weft.input_shape and the count of
// weft.classes for own data; for the built-in data sets (and checkpoints that say neither) the
// default nn::ClassifierShape. Malformed → FormatError naming `file`.
nn::ClassifierShape saved_classifier_shape(const Metadata& metadata, const std::string& file);
// weft.classes, or nullopt when the checkpoint has none (a built-in data set: its labels).
std::optional<std::vector<std::string>> saved_classes(const Metadata& metadata, const std::string& file);

// weft.class_distribution of the labels (i64 [N], ids below `classes`): each class's fraction.
Metadata class_distribution_metadata(const Tensor& labels, int64_t classes);
Metadata class_distribution_metadata(const std::vector<double>& fractions);
// weft.class_distribution of `metadata` for `classes` classes, or nullopt when it has none;
// malformed (not `classes` fractions from 0 to 1) → FormatError naming `file`.
std::optional<std::vector<double>> saved_class_distribution(const Metadata& metadata, int64_t classes,
                                                             const std::string& file);

// weft.gpt and weft.tokenizer for a GPT.
Metadata gpt_metadata(const nn::GPTConfig& config, const data::Tokenizer& tokenizer);
// What a GPT checkpoint (DIR or DIR/model.safetensors) says about its model, from the header
// alone. weft.model not gpt → ValueError; weft.gpt or weft.tokenizer missing or malformed → FormatError.
struct SavedGPT {
  nn::GPTConfig config;
  std::string tokenizer;  // identity
  std::string dir;        // where the tokenizer's files sit: the directory the weights were read from
};
SavedGPT read_saved_gpt(const std::string& path);
// The tokenizer `spec` names (data::load_tokenizer's), or for "" the checkpoint's own (byte,
// DIR/tokenizer.model, or DIR/vocab.json and DIR/merges.txt: IOError when a file is missing).
// Either way it must be the one the model was trained with: ValueError naming both otherwise.
std::unique_ptr<data::Tokenizer> tokenizer_for(const SavedGPT& saved, const std::string& spec);
// Writes DIR/tokenizer.model for a SentencePiece tokenizer, DIR/vocab.json and DIR/merges.txt for
// GPT-2's (each atomically); nothing for bytes.
void save_tokenizer(const data::Tokenizer& tokenizer, const std::string& dir);

}  // namespace weft::infer
