// Loading for inference: one call takes any checkpoint weft writes and returns a model ready to
// run with what it is. What `weft eval`, `weft generate`, `weft quantize` and the server load.
//
//   f32 or bf16 classifier        `weft train --model mlp|cnn --out DIR` (bf16: the same model after
//                                 Module::to(bf16), saved with its metadata)
//   int8 or int4 classifier       `weft quantize` (quant/checkpoint.h)
//   GPT with its tokenizer        `weft train --model gpt --out DIR` (DIR/tokenizer.model for SentencePiece),
//                                 `weft import gpt2` (DIR/vocab.json and DIR/merges.txt: GPT-2's BPE),
//                                 `weft quantize` (int8 or int4 weight-only projections)
//
// `path` is a checkpoint directory (its model.safetensors) or a .safetensors file; the metadata
// keys are those of infer/metadata.h. Invariants of a LoadedModel: the model is in eval mode and
// its weights are all of `dtype`, f32 or bf16 (a file's f64 or f16 weights are converted to f32;
// quantized models: their f32 scales, biases and activations);
// a classifier's input is `dtype` [N, *input_shape] normalised with `normalization`
// (classifier_input makes it from raw pixels); a GPT's input is i64 token ids [B, T] with
// T <= input_shape[0], and `tokenizer` is the one it was trained with. Loading either returns all
// of this or throws: IOError for a file that cannot be read (a GPT's missing tokenizer files
// included), FormatError for a file that is not a weft checkpoint of the kind it claims
// (not safetensors, truncated, an unknown weft.model, tensors that do not fit the architecture,
// malformed metadata), ValueError for options that contradict the file.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/data/dataset.h"
#include "weft/data/tokenizer.h"
#include "weft/infer/metadata.h"
#include "weft/nn/gpt.h"
#include "weft/nn/model_kind.h"
#include "weft/nn/module.h"

namespace weft::infer {

// The tensors and metadata of DIR/model.safetensors, or of a .safetensors file given directly,
// as they are in the file (any dtype), for tools that list or convert weights.
struct Weights {
  nn::StateDict state;
  std::string model_name;                       // weft.model; "" when the file does not say
  std::map<std::string, std::string> metadata;  // all of the file's
};
Weights load_weights(const std::string& path);

// Whether `tensors`, read from `file`, are the state of `model` (a `kind`): each of its tensors and
// nothing else, each of its shape, of a floating dtype where the model's is floating and of its
// dtype otherwise (floating weights convert as they load). FormatError otherwise, one line naming
// the file, the tensor, and what the model has against what the file holds. Names `left_out` says
// true of are not checked either way (tensors a fine-tuning initialises afresh).
void check_fit(const nn::Module& model, const std::string& kind, const nn::StateDict& tensors, const std::string& file,
               const std::function<bool(const std::string& name)>& left_out = {});

struct LoadOptions {
  // ({} initialisers so that designated initialisers may leave any of them out.)
  std::optional<nn::ModelKind> model{};  // for a file without weft.model; must agree with one that has it
  std::string tokenizer{};  // GPTs: "" the checkpoint's own, else byte or a SentencePiece file (the same one)
  // Classifiers: the data set the caller means; "": the checkpoint's (fashion-mnist for older ones
  // that do not say). One the checkpoint names another of → ValueError.
  std::string dataset{};
};

struct LoadedModel {
  std::shared_ptr<nn::Module> model;
  nn::ModelKind kind = nn::ModelKind::mlp;
  Shape input_shape;                 // one sample: [C, H, W] for classifiers, [context] (at most) for a GPT
  std::vector<std::string> labels;   // class names by class id; empty for a GPT
  DType dtype = DType::f32;          // of the floating weights
  std::string scheme = "none";       // quantization: none | int8-static | int8-dynamic | int4-weight-only |
                                     // int8-weight-only (a GPT's: int8 or int4 weight-only)
  std::string file;                  // the .safetensors file read
  std::map<std::string, std::string> metadata;  // all of the file's

  // Classifiers. A user's own data (weft train --data): dataset image-folder, whose images the
  // checkpoint's shape and normalisation describe, or table, whose features `table` describes.
  std::string dataset;               // fashion-mnist | mnist | image-folder | table
  data::Normalization normalization; // images: applied to pixel / 255
  std::optional<TableSchema> table;  // tables: the columns read and their standardisation
  std::string note;                  // what was assumed (an older checkpoint's normalisation); "" when nothing

  // GPTs.
  std::shared_ptr<nn::GPT> gpt;      // the same model as `model`, typed (its config says its shape)
  std::unique_ptr<data::Tokenizer> tokenizer;
};
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// A classifier's input from raw u8 pixels as a data set file holds them: [N, *input_shape] or one
// sample [*input_shape] (a single channel may be left out: [N, H, W], [H, W]). Returns `dtype`
// [N, C, H, W] with (x / 255 - mean[c]) / std[c], the values data::ImageDataset gives for the same
// pixels and statistics. A GPT or a table classifier, a non-u8 tensor or another shape →
// ValueError / DTypeError / ShapeError.
Tensor classifier_input(const LoadedModel& loaded, const Tensor& pixels);
// A table classifier's input from its raw features, in weft.table's column order: [N, F] or one
// row [F], any floating or integer dtype. Returns `dtype` [N, F] with (x_f - mean_f) / std_f, the
// values data::TableDataset gives. Another classifier → ValueError; another shape → ShapeError.
Tensor table_input(const LoadedModel& loaded, const Tensor& features);

}  // namespace weft::infer
