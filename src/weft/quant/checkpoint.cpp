#include "weft/quant/checkpoint.h"

#include <filesystem>
#include <set>

#include "weft/io/input_file.h"
#include "weft/io/safetensors.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"
#include "weft/nn/models.h"
#include "weft/quant/conv.h"
#include "weft/quant/linear.h"

namespace weft::quant {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSchemeKey = "weft.quantization";
constexpr const char* kGroupSizeKey = "weft.int4_group_size";

std::string file_of(const std::string& path) {
  return io::is_directory(path) ? (fs::path(path) / "model.safetensors").string() : path;
}

Scheme scheme_from_name(const std::string& name, const std::string& path) {
  for (Scheme s : {Scheme::int8_static, Scheme::int8_dynamic, Scheme::int4_weight_only, Scheme::int8_weight_only})
    if (name == scheme_name(s)) return s;
  throw FormatError(str(path, ": unknown ", kSchemeKey, " '", name,
                        "': expected int8-static, int8-dynamic, int4-weight-only or int8-weight-only"));
}

// The file's tensors by name, handed out one at a time with their dtype and shape checked;
// whatever is never asked for is reported as unexpected at the end.
class TensorReader {
 public:
  TensorReader(const io::SafetensorsFile& file, std::string path, Scheme scheme)
      : path_(std::move(path)), scheme_(scheme) {
    for (const auto& [name, t] : file.tensors) tensors_.emplace(name, t);
  }

  Tensor take(const std::string& name, DType dtype, const Shape& shape, const char* role) {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      throw FormatError(str(path_, ": the ", scheme_name(scheme_), " checkpoint has no tensor '", name, "' (", role,
                            ", ", dtype_name(dtype), " ", shape_str(shape),
                            "); the file is incomplete: re-create it with weft quantize"));
    const Tensor t = it->second;
    WEFT_CHECK(t.dtype() == dtype && t.shape() == shape, FormatError, path_, ": tensor '", name, "' (", role, ") is ",
               dtype_name(t.dtype()), " ", shape_str(t.shape()), ", expected ", dtype_name(dtype), " ",
               shape_str(shape), " for a ", scheme_name(scheme_), " checkpoint");
    tensors_.erase(it);
    return t;
  }

  void expect_all_taken() const {
    if (tensors_.empty()) return;
    std::string names;
    for (const auto& [name, t] : tensors_) names += (names.empty() ? "'" : ", '") + name + "'";
    throw FormatError(str(path_, ": unexpected tensors ", names, " for a ", scheme_name(scheme_), " checkpoint"));
  }

 private:
  std::string path_;
  Scheme scheme_;
  std::map<std::string, Tensor> tensors_;
};

cpu::QuantParams input_params(TensorReader& reader, const std::string& prefix) {
  Tensor scale = reader.take(prefix + "input_scale", DType::f32, {}, "the input's quantization scale");
  Tensor zero_point = reader.take(prefix + "input_zero_point", DType::i32, {}, "the input's zero point");
  return {static_cast<float>(scale.item()), static_cast<int32_t>(zero_point.item())};
}

Tensor bias_of(TensorReader& reader, const std::string& prefix, const Tensor& float_bias) {
  if (!float_bias.defined()) return {};
  return reader.take(prefix + "bias", DType::f32, float_bias.shape(), "the f32 bias");
}

std::shared_ptr<nn::Module> load_linear(TensorReader& reader, const std::string& prefix, const nn::Linear& linear,
                                        Scheme scheme, int64_t group_size) {
  const int64_t in = linear.in_features, out = linear.out_features;
  if (scheme == Scheme::int4_weight_only) {
    const int64_t groups = (in + group_size - 1) / group_size;
    Tensor packed = reader.take(prefix + "weight", DType::u8, {out, (in + 1) / 2}, "int4 weights, two per byte");
    Tensor scales = reader.take(prefix + "weight_scale", DType::f32, {out, groups}, "per-group weight scales");
    return std::make_shared<Int4Linear>(in, group_size, packed, scales, bias_of(reader, prefix, linear.bias));
  }
  Tensor weight = reader.take(prefix + "weight", DType::i8, {out, in}, "int8 weights");
  Tensor scale = reader.take(prefix + "weight_scale", DType::f32, {out}, "per-output-channel weight scales");
  Tensor bias = bias_of(reader, prefix, linear.bias);
  if (scheme == Scheme::int8_dynamic) return std::make_shared<DynamicQuantizedLinear>(weight, scale, bias);
  return std::make_shared<QuantizedLinear>(weight, scale, bias, input_params(reader, prefix));
}

std::shared_ptr<nn::Module> load_conv(TensorReader& reader, const std::string& prefix,
                                      const std::shared_ptr<nn::Conv2d>& conv, Scheme scheme) {
  const Shape shape = conv->weight.shape();
  if (scheme != Scheme::int8_static) {  // convolutions stay f32
    nn::StateDict state;
    state.insert("weight", reader.take(prefix + "weight", DType::f32, shape, "f32 convolution weights"));
    if (conv->bias.defined()) state.insert("bias", bias_of(reader, prefix, conv->bias));
    conv->load_state_dict(state);
    return conv;
  }
  Tensor weight = reader.take(prefix + "weight", DType::i8, shape, "int8 weights");
  Tensor scale = reader.take(prefix + "weight_scale", DType::f32, {shape[0]}, "per-output-channel weight scales");
  Tensor bias = bias_of(reader, prefix, conv->bias);
  return std::make_shared<QuantizedConv2d>(weight, scale, bias, conv2d_params(*conv), input_params(reader, prefix));
}

int64_t group_size_of(const std::map<std::string, std::string>& metadata, const std::string& path) {
  auto it = metadata.find(kGroupSizeKey);
  WEFT_CHECK(it != metadata.end(), FormatError, path, ": an int4 checkpoint must say its group size in ", kGroupSizeKey);
  try {
    size_t used = 0;
    int64_t g = std::stoll(it->second, &used);
    if (used == it->second.size() && g > 0) return g;
  } catch (const std::logic_error&) {
  }
  throw FormatError(str(path, ": ", kGroupSizeKey, " is '", it->second, "', expected a positive integer"));
}

}  // namespace

const char* scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::int8_static: return "int8-static";
    case Scheme::int8_dynamic: return "int8-dynamic";
    case Scheme::int4_weight_only: return "int4-weight-only";
    case Scheme::int8_weight_only: return "int8-weight-only";
  }
  return "unknown";
}

void save_quantized_classifier(const std::string& path, const nn::Sequential& model, const std::string& model_name,
                               Scheme scheme, const std::map<std::string, std::string>& extra_metadata) {
  std::map<std::string, std::string> metadata = extra_metadata;
  metadata["format"] = "pt";
  metadata["weft.model"] = model_name;
  metadata[kSchemeKey] = scheme_name(scheme);
  if (scheme == Scheme::int4_weight_only) {
    metadata["weft.weights"] = "Linear: int4 symmetric per group of input features, two per byte, low nibble first";
    metadata["weft.activations"] = "f32";
    std::set<int64_t> group_sizes;
    for (size_t i = 0; i < model.size(); ++i)
      if (auto* linear = dynamic_cast<Int4Linear*>(model[i].get())) group_sizes.insert(linear->group_size);
    WEFT_CHECK(group_sizes.size() == 1, ValueError, "save_quantized_classifier: an int4 model needs one group size for "
               "all its Int4Linear layers, found ", group_sizes.size());
    metadata[kGroupSizeKey] = std::to_string(*group_sizes.begin());
  } else {
    metadata["weft.weights"] = "i8 symmetric per output channel (zero point 0, range -127..127)";
    metadata["weft.activations"] = scheme == Scheme::int8_static
                                       ? "u8 affine per tensor, scale and zero point from calibration"
                                       : "u8 affine per tensor, scale and zero point from each batch";
  }
  nn::StateDict state = model.state_dict();
  io::save_safetensors(path, {state.begin(), state.end()}, metadata);
}

bool is_quantized_checkpoint(const std::string& path) {
  return io::read_safetensors_header(file_of(path)).metadata.contains(kSchemeKey);
}

QuantizedClassifier load_quantized_classifier(const std::string& path) {
  const std::string file = file_of(path);
  io::SafetensorsFile loaded = io::load_safetensors(file);
  auto scheme_it = loaded.metadata.find(kSchemeKey);
  WEFT_CHECK(scheme_it != loaded.metadata.end(), FormatError, file, ": not a quantized checkpoint (no ", kSchemeKey,
             " in its metadata)");
  QuantizedClassifier result;
  result.scheme = scheme_from_name(scheme_it->second, file);
  WEFT_CHECK(result.scheme != Scheme::int8_weight_only, FormatError, file,
             ": int8-weight-only is a GPT's quantization; a classifier's is int8-static, int8-dynamic or "
             "int4-weight-only");
  result.metadata = loaded.metadata;
  auto model_it = loaded.metadata.find("weft.model");
  WEFT_CHECK(model_it != loaded.metadata.end(), FormatError, file, ": a quantized checkpoint must name its model in "
             "weft.model (mlp or cnn)");
  result.model_name = model_it->second;
  const std::optional<nn::ModelKind> kind = nn::find_model_kind(result.model_name);
  WEFT_CHECK(kind && nn::is_image_classifier(*kind), FormatError, file, ": unknown model '", result.model_name,
             "': expected mlp or cnn");
  const std::shared_ptr<nn::Sequential> architecture = nn::make_image_classifier(*kind);
  const int64_t group_size = result.scheme == Scheme::int4_weight_only ? group_size_of(loaded.metadata, file) : 0;
  TensorReader reader(loaded, file, result.scheme);
  result.model = std::make_shared<nn::Sequential>();
  try {
    for (size_t i = 0; i < architecture->size(); ++i) {
      const std::string prefix = std::to_string(i) + ".";
      std::shared_ptr<nn::Module> child = (*architecture)[i];
      if (auto* linear = dynamic_cast<nn::Linear*>(child.get()))
        child = load_linear(reader, prefix, *linear, result.scheme, group_size);
      else if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(child))
        child = load_conv(reader, prefix, conv, result.scheme);
      result.model->push_back(child);
    }
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {  // a scale that is not positive, a zero point out of range, ...
    throw FormatError(str(file, ": ", e.what()));
  }
  reader.expect_all_taken();
  result.model->eval();
  return result;
}

void save_quantized_gpt(const std::string& path, const nn::Module& model, int bits, int64_t group_size,
                        std::map<std::string, std::string> metadata) {
  WEFT_CHECK(bits == 8 || bits == 4, ValueError, "save_quantized_gpt: bits must be 8 or 4, got ", bits);
  metadata["format"] = "pt";
  metadata["weft.model"] = "gpt";
  metadata[kSchemeKey] = scheme_name(bits == 8 ? Scheme::int8_weight_only : Scheme::int4_weight_only);
  metadata["weft.weights"] = bits == 8 ? "the blocks' Linear weights: i8 symmetric per output channel; the rest f32"
                                       : "the blocks' Linear weights: int4 symmetric per group of input features, "
                                         "two per byte, low nibble first; the rest f32";
  metadata["weft.activations"] = "f32";
  if (bits == 4) metadata[kGroupSizeKey] = std::to_string(group_size);
  nn::StateDict state = model.state_dict();
  io::save_safetensors(path, {state.begin(), state.end()}, metadata);
}

std::optional<GptQuantization> gpt_quantization(const std::map<std::string, std::string>& metadata,
                                                const std::string& path) {
  auto it = metadata.find(kSchemeKey);
  if (it == metadata.end()) return std::nullopt;
  GptQuantization q;
  q.scheme = scheme_from_name(it->second, path);
  WEFT_CHECK(q.scheme == Scheme::int8_weight_only || q.scheme == Scheme::int4_weight_only, FormatError, path, ": ",
             kSchemeKey, " '", it->second, "' is a classifier's; a GPT's is int8-weight-only or int4-weight-only");
  q.bits = q.scheme == Scheme::int8_weight_only ? 8 : 4;
  if (q.bits == 4) q.group_size = group_size_of(metadata, path);
  return q;
}

}  // namespace weft::quant
