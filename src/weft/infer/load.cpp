#include "weft/infer/load.h"

#include <optional>

#include "weft/infer/metadata.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft/quant/checkpoint.h"
#include "weft/quant/ptq.h"

namespace weft::infer {

namespace {

// The one floating dtype of `state`'s tensors (f32 when it has none); a mixture → FormatError.
DType weights_dtype(const nn::StateDict& state, const std::string& file) {
  std::optional<std::pair<std::string, DType>> first;
  for (const auto& [name, t] : state) {
    if (!is_floating(t.dtype())) continue;
    if (!first) first.emplace(name, t.dtype());
    WEFT_CHECK(t.dtype() == first->second, FormatError, file, ": tensor '", name, "' is ", dtype_name(t.dtype()),
               " but '", first->first, "' is ", dtype_name(first->second),
               "; expected every floating weight in one dtype");
  }
  return first ? first->second : DType::f32;
}

// The dtype a model runs in: bf16 weights (weft's own low-precision models) as saved; f32, and any
// other floating dtype a foreign file holds (PyTorch's f64 or f16), in f32, which load_state_dict
// converts them to: weft's kernels and autocast take f32 and bf16 models.
DType model_dtype(DType saved) { return saved == DType::bf16 ? DType::bf16 : DType::f32; }

// `model` with `weights` copied in, converted to `dtype`.
void load_into(nn::Module& model, const Weights& weights, const std::string& file, DType dtype) {
  check_fit(model, weights.model_name.empty() ? "model" : weights.model_name, weights.state, file);
  if (dtype != DType::f32) model.to(dtype);
  model.load_state_dict(weights.state);
  model.eval();
}

void load_classifier_input(LoadedModel& loaded, const LoadOptions& options) {
  auto dataset = loaded.metadata.find("weft.dataset");
  WEFT_CHECK(options.dataset.empty() || dataset == loaded.metadata.end() || dataset->second == options.dataset,
             ValueError, "--dataset ", options.dataset, ": ", loaded.file, " was trained on ", dataset->second,
             " (leave --dataset out to use its data set)");
  if (std::optional<std::vector<std::string>> classes = saved_classes(loaded.metadata, loaded.file)) {
    // A user's own data: the checkpoint says everything its input needs.
    WEFT_CHECK(dataset != loaded.metadata.end() &&
                   (dataset->second == kImageFolderDataset || dataset->second == kTableDataset),
               FormatError, loaded.file, ": weft.classes belongs to a model trained on ", kImageFolderDataset, " or ",
               kTableDataset, ", and its weft.dataset is '", dataset == loaded.metadata.end() ? "" : dataset->second, "'");
    loaded.dataset = dataset->second;
    loaded.labels = *classes;
    loaded.input_shape = saved_classifier_shape(loaded.metadata, loaded.file).input;
    if (loaded.dataset == kTableDataset) {
      loaded.table = saved_table(loaded.metadata, loaded.file);
      WEFT_CHECK(loaded.table.has_value(), FormatError, loaded.file, ": a table classifier without weft.table");
      WEFT_CHECK(loaded.input_shape == Shape{std::ssize(loaded.table->features)}, FormatError, loaded.file,
                 ": weft.input_shape ", shape_str(loaded.input_shape), " is not the ", loaded.table->features.size(),
                 " features of weft.table");
      return;
    }
    std::optional<data::Normalization> saved = saved_normalization(loaded.metadata, loaded.file);
    WEFT_CHECK(saved.has_value(), FormatError, loaded.file, ": an image-folder classifier without weft.normalization");
    loaded.normalization = *saved;
  } else {
    try {
      if (dataset != loaded.metadata.end()) loaded.dataset = dataset->second;
      else loaded.dataset = options.dataset.empty() ? "fashion-mnist" : options.dataset;
      const ImageDatasetInfo& info = image_dataset_info(loaded.dataset);
      loaded.labels = info.labels;
      loaded.input_shape = info.sample_shape;
      if (std::optional<data::Normalization> saved = saved_normalization(loaded.metadata, loaded.file)) {
        loaded.normalization = *saved;
      } else {
        loaded.normalization = info.normalization;
        loaded.note = str(loaded.file, " has no saved normalisation (it predates weft.normalization); using ",
                          loaded.dataset, "'s training statistics");
      }
    } catch (const ValueError& e) {
      if (dataset == loaded.metadata.end()) throw;  // the caller's fallback, not the file, is wrong
      throw FormatError(str(loaded.file, ": weft.dataset: ", e.what()));
    }
  }
  WEFT_CHECK(loaded.input_shape.size() == 3 && std::ssize(loaded.normalization.mean) == loaded.input_shape[0],
             FormatError, loaded.file, ": weft.normalization has ", loaded.normalization.mean.size(), " channels; the ",
             nn::model_kind_name(loaded.kind), " takes ", shape_str(loaded.input_shape));
}

void load_gpt(LoadedModel& loaded, const std::string& path, const LoadOptions& options) {
  SavedGPT saved = read_saved_gpt(path);
  loaded.tokenizer = tokenizer_for(saved, options.tokenizer);
  Weights weights = load_weights(loaded.file);
  loaded.dtype = model_dtype(weights_dtype(weights.state, loaded.file));
  loaded.gpt = std::make_shared<nn::GPT>(saved.config);
  // A quantized GPT: the same model quantized alike first, so that its tensors are the file's kind.
  if (const std::optional<quant::GptQuantization> q = quant::gpt_quantization(weights.metadata, loaded.file)) {
    quant::quantize_linear_weights(*loaded.gpt, q->bits, q->group_size);
    loaded.scheme = quant::scheme_name(q->scheme);
  }
  load_into(*loaded.gpt, weights, loaded.file, loaded.dtype);
  loaded.model = loaded.gpt;
  loaded.input_shape = {saved.config.context};
}

}  // namespace

void check_fit(const nn::Module& model, const std::string& kind, const nn::StateDict& tensors, const std::string& file,
               const std::function<bool(const std::string& name)>& left_out) {
  const nn::StateDict own = model.state_dict();
  const std::string prefix = str(file, ": the tensors do not fit a ", kind, ": ");
  auto described = [](const Tensor& t) { return str(dtype_name(t.dtype()), " ", shape_str(t.shape())); };
  for (const auto& [name, expected] : own) {
    if (left_out && left_out(name)) continue;
    WEFT_CHECK(tensors.contains(name), FormatError, prefix, "it has no '", name, "' (the model's is ", described(expected), ")");
    const Tensor& found = tensors.at(name);
    WEFT_CHECK(found.shape() == expected.shape(), FormatError, prefix, "'", name, "' is ", shape_str(found.shape()),
               ", the model's is ", shape_str(expected.shape()));
    WEFT_CHECK(is_floating(expected.dtype()) ? is_floating(found.dtype()) : found.dtype() == expected.dtype(), FormatError,
               prefix, "'", name, "' is ", dtype_name(found.dtype()), ", the model's is ", dtype_name(expected.dtype()),
               is_floating(expected.dtype()) ? " (a floating dtype)" : "");
  }
  for (const auto& [name, found] : tensors)
    WEFT_CHECK(own.contains(name) || (left_out && left_out(name)), FormatError, prefix, "'", name, "' (", described(found), ") is not one of the model's tensors");
}

Weights load_weights(const std::string& path) {
  io::SafetensorsFile loaded = io::load_safetensors(model_file(path));
  Weights weights;
  for (const auto& [name, tensor] : loaded.tensors) weights.state.insert(name, tensor);
  auto it = loaded.metadata.find("weft.model");
  if (it != loaded.metadata.end()) weights.model_name = it->second;
  weights.metadata = std::move(loaded.metadata);
  return weights;
}

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  LoadedModel loaded;
  loaded.file = model_file(path);
  loaded.metadata = io::read_safetensors_header(loaded.file).metadata;
  auto saved_kind = loaded.metadata.find("weft.model");
  std::optional<nn::ModelKind> kind = options.model;
  if (saved_kind != loaded.metadata.end()) {
    WEFT_CHECK(!saved_kind->second.starts_with("python:"), ValueError, loaded.file, " holds ",
               saved_kind->second.substr(7), ", a model defined in Python (weft.train.fit), which weft's commands cannot "
               "build: load its weights in Python, model.load_state_dict(weft.load('", loaded.file, "'))");
    kind = nn::find_model_kind(saved_kind->second);
    WEFT_CHECK(!options.model || kind == options.model, ValueError, loaded.file, " holds a ", saved_kind->second,
               " model, not ", nn::model_kind_name(*options.model));
    WEFT_CHECK(kind.has_value(), FormatError, loaded.file, ": weft.model is '", saved_kind->second,
               "'; expected mlp, cnn or gpt (a checkpoint weft wrote)");
  } else {
    WEFT_CHECK(kind.has_value(), ValueError, loaded.file, " does not say which model it holds (no weft.model in "
               "its metadata); pass the architecture it was trained as (--model mlp|cnn)");
  }
  loaded.kind = *kind;
  if (loaded.kind == nn::ModelKind::gpt) {
    load_gpt(loaded, path, options);
    return loaded;
  }
  if (quant::is_quantized_checkpoint(loaded.file)) {
    quant::QuantizedClassifier quantized = quant::load_quantized_classifier(loaded.file);
    loaded.model = quantized.model;
    loaded.scheme = quant::scheme_name(quantized.scheme);
  } else {
    Weights weights = load_weights(loaded.file);
    weights.model_name = nn::model_kind_name(loaded.kind);
    loaded.dtype = model_dtype(weights_dtype(weights.state, loaded.file));
    // A shape the model cannot take (a table for the cnn) is the file's fault, not the caller's.
    try {
      loaded.model = nn::make_image_classifier(loaded.kind, saved_classifier_shape(loaded.metadata, loaded.file));
    } catch (const ValueError& e) {
      throw FormatError(str(loaded.file, ": ", e.what()));
    }
    load_into(*loaded.model, weights, loaded.file, loaded.dtype);
  }
  load_classifier_input(loaded, options);
  return loaded;
}

Tensor classifier_input(const LoadedModel& loaded, const Tensor& pixels) {
  WEFT_CHECK(loaded.kind != nn::ModelKind::gpt, ValueError, "classifier_input: ", loaded.file,
             " holds a GPT, whose input is token ids");
  WEFT_CHECK(pixels.dtype() == DType::u8, DTypeError, "classifier_input: expected u8 pixels (0..255), found ",
             dtype_name(pixels.dtype()));
  WEFT_CHECK(!loaded.table, ValueError, "classifier_input: ", loaded.file, " holds a table classifier, whose input is "
             "its features (table_input)");
  const Shape& sample = loaded.input_shape;  // [C, H, W]
  const int64_t channels = sample[0], plane = sample[1] * sample[2];
  const Shape& shape = pixels.shape();
  auto ends_with = [&](const Shape& tail) {
    return shape.size() >= tail.size() && shape.size() <= tail.size() + 1 &&
           std::equal(tail.begin(), tail.end(), shape.end() - std::ssize(tail));
  };
  WEFT_CHECK(ends_with(sample) || (channels == 1 && ends_with(Shape{sample[1], sample[2]})), ShapeError,
             "classifier_input: ", nn::model_kind_name(loaded.kind), " takes images ", shape_str(sample),
             " (or a batch of them), found ", shape_str(shape));
  const int64_t batch = pixels.numel() / (channels * plane);
  Tensor input = Tensor::empty({batch, channels, sample[1], sample[2]}, DType::f32);
  const Tensor source = pixels.contiguous_untracked();
  const uint8_t* src = source.data<uint8_t>();
  float* dst = input.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const double mean = loaded.normalization.mean[c], std = loaded.normalization.std[c];
    float table[256];
    for (int x = 0; x < 256; ++x) table[x] = static_cast<float>((x / 255.0 - mean) / std);
    for (int64_t n = 0; n < batch; ++n) {
      const int64_t offset = (n * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) dst[offset + j] = table[src[offset + j]];
    }
  }
  return input.to(loaded.dtype);
}

Tensor table_input(const LoadedModel& loaded, const Tensor& features) {
  WEFT_CHECK(loaded.table.has_value(), ValueError, "table_input: ", loaded.file, " holds no table classifier");
  const int64_t count = std::ssize(loaded.table->features);
  const Shape& shape = features.shape();
  WEFT_CHECK((shape.size() == 1 || shape.size() == 2) && shape.back() == count, ShapeError, "table_input: ",
             loaded.file, " takes ", count, " features a row ([N, ", count, "] or [", count, "]), found ",
             shape_str(shape));
  const std::vector<float> values = features.to(DType::f32).contiguous().to_vector<float>();
  const int64_t rows = static_cast<int64_t>(values.size()) / count;
  std::vector<float> standardised(values.size());
  const data::Standardization& s = loaded.table->standardization;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < count; ++f)
      standardised[static_cast<size_t>(r * count + f)] =
          (values[static_cast<size_t>(r * count + f)] - s.mean[static_cast<size_t>(f)]) / s.std[static_cast<size_t>(f)];
  return Tensor::from_vector(standardised, {rows, count}).to(loaded.dtype);
}

}  // namespace weft::infer
