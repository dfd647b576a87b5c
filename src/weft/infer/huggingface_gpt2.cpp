#include "weft/infer/huggingface_gpt2.h"

#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "weft/autograd/grad_mode.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/io/atomic_file.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/input_file.h"
#include "weft/io/json.h"
#include "weft/io/safetensors.h"
#include "weft/io/torch_checkpoint.h"
#include "weft/nn/model_kind.h"

namespace weft::infer {

namespace {

namespace fs = std::filesystem;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kTorchWeightsFile = "pytorch_model.bin";
constexpr const char* kPrefix = "transformer.";
constexpr double kLayerNormEpsilon = 1e-5;
// A config.json is a few dozen keys; the bound only keeps a wrong file from being read whole.
constexpr uint64_t kMaxConfigBytes = 1 << 20;

std::string in_dir(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// Every tensor of weft's GPT of `config`, in the order the model registers them, with its shape.
std::vector<std::pair<std::string, Shape>> gpt_tensors(const nn::GPTConfig& config) {
  std::vector<std::pair<std::string, Shape>> tensors = {{"wte.weight", {config.vocab, config.dim}},
                                                        {"wpe.weight", {config.context, config.dim}}};
  for (int64_t layer = 0; layer < config.layers; ++layer)
    for (const nn::GPTBlockParameter& p : config.block_parameters())
      tensors.emplace_back(str("h.", layer, ".", p.name), p.shape);
  tensors.emplace_back("ln_f.weight", Shape{config.dim});
  tensors.emplace_back("ln_f.bias", Shape{config.dim});
  return tensors;
}

// The four projections, which Hugging Face's Conv1D stores [in, out] and weft's Linear [out, in].
bool is_conv1d_weight(const std::string& name) {
  return name.ends_with("c_attn.weight") || name.ends_with("c_proj.weight") || name.ends_with("c_fc.weight");
}

Tensor transposed(const Tensor& t) {
  NoGradGuard no_grad;
  return t.transpose(0, 1).contiguous();
}

// The dtype weft keeps a file's weights in: bf16 when all of them are, else f32.
DType kept_dtype(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.dtype() != DType::bf16) return DType::f32;
  return DType::bf16;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous_untracked(), y = b.contiguous_untracked();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// config.json's optional fields that change the architecture: each must be absent (Hugging
// Face's default, which is weft's) or say what weft's GPT does.
void check_representable(const nlohmann::json& c, const nn::GPTConfig& config, const std::string& where) {
  auto refuse = [&](const std::string& what) {
    throw ValueError(str(where, ": ", what, "; weft's GPT cannot represent it"));
  };
  auto present = [&](const char* key) { return c.contains(key) && !c[key].is_null(); };
  if (present("model_type") && c["model_type"] != "gpt2")
    refuse(str("\"model_type\" is ", io::json_excerpt(c["model_type"]), ", not \"gpt2\""));
  if (present("layer_norm_epsilon") &&
      io::json_number(c, "layer_norm_epsilon", where, 0) != kLayerNormEpsilon)
    refuse(str("\"layer_norm_epsilon\" is ", io::json_excerpt(c["layer_norm_epsilon"]), ", not GPT-2's 1e-05"));
  if (present("activation_function")) {
    const std::string activation = io::json_string(c, "activation_function", where);
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
      refuse(str("\"activation_function\" is \"", activation, "\", not GELU's tanh form (gelu_new)"));
  }
  if (present("n_inner") && io::json_integer(c, "n_inner", where) != 4 * config.dim)
    refuse(str("\"n_inner\" is ", io::json_excerpt(c["n_inner"]), ", not 4 * n_embd (", 4 * config.dim, ")"));
  auto flag = [&](const char* key, bool weft_value, const char* meaning) {
    if (!present(key)) return;
    WEFT_CHECK(c[key].is_boolean(), FormatError, where, ": \"", key, "\" must be true or false, found ",
               io::json_excerpt(c[key]));
    if (c[key].get<bool>() != weft_value)
      refuse(str("\"", key, "\" is ", c[key].get<bool>() ? "true" : "false", " (", meaning, ")"));
  };
  flag("scale_attn_weights", true, "attention scores not scaled by 1 / sqrt(head dim)");
  flag("scale_attn_by_inverse_layer_idx", false, "attention scaled by its layer too");
  flag("add_cross_attention", false, "cross-attention to an encoder");
  flag("tie_word_embeddings", true, "an output head of its own");
}

nn::GPTConfig read_config(const std::string& dir) {
  const std::string file = in_dir(dir, kConfigFile);
  std::error_code error;
  WEFT_CHECK(fs::exists(file, error), IOError, dir, ": no ", kConfigFile,
             "; expected a GPT-2 in Hugging Face's layout (config.json, model.safetensors, vocab.json, merges.txt)");
  const nlohmann::json c = io::parse_json(io::read_input(file, kMaxConfigBytes), file);
  WEFT_CHECK(c.is_object(), FormatError, file, ": expected a JSON object, found ", io::json_excerpt(c));
  constexpr int64_t kMaxSize = INT32_MAX;  // token ids are 32-bit; sizes as weft.gpt bounds them
  nn::GPTConfig config{.layers = io::json_integer(c, "n_layer", file, 1, nn::kMaxGptLayers),
                       .heads = io::json_integer(c, "n_head", file, 1, kMaxSize),
                       .dim = io::json_integer(c, "n_embd", file, 1, kMaxSize),
                       .context = io::json_integer(c, c.contains("n_positions") ? "n_positions" : "n_ctx", file, 1,
                                                   kMaxSize),
                       .vocab = io::json_integer(c, "vocab_size", file, 1, kMaxSize),
                       .dropout = 0};
  WEFT_CHECK(config.dim % config.heads == 0, FormatError, file, ": \"n_embd\" ", config.dim,
             " must be a multiple of \"n_head\" ", config.heads);
  check_representable(c, config, file);
  return config;
}

}  // namespace

Gpt2Model read_huggingface_gpt2(const std::string& dir) {
  WEFT_CHECK(io::is_directory(dir), IOError, dir, ": no such directory (expected a GPT-2 in Hugging Face's layout: ",
             "config.json, model.safetensors, vocab.json, merges.txt)");
  Gpt2Model model;
  model.config = read_config(dir);
  // model.safetensors, or else PyTorch's pytorch_model.bin (read without running its pickle).
  std::error_code error;
  const bool safetensors = fs::exists(in_dir(dir, kWeightsFile), error);
  const std::string file = in_dir(dir, safetensors ? kWeightsFile : kTorchWeightsFile);
  WEFT_CHECK(safetensors || fs::exists(file, error), IOError, dir, ": no ", kWeightsFile, " nor ", kTorchWeightsFile,
             " (expected a GPT-2 in Hugging Face's layout)");

  // Names, dtypes and shapes first: nothing is converted before the whole file fits.
  std::vector<io::TorchTensorInfo> infos;
  if (safetensors) {
    for (const io::TensorInfo& t : io::read_safetensors_header(file).tensors) infos.push_back({t.name, t.dtype, t.shape});
  } else {
    infos = io::read_torch_state_dict_header(file);
  }
  std::map<std::string, const io::TorchTensorInfo*> by_name;  // without the prefix
  for (const io::TorchTensorInfo& t : infos) {
    const std::string name = t.name.starts_with(kPrefix) ? t.name.substr(std::strlen(kPrefix)) : t.name;
    WEFT_CHECK(by_name.emplace(name, &t).second, FormatError, file, ": holds '", name, "' both with and without the ",
               "prefix '", kPrefix, "'");
  }
  const std::vector<std::pair<std::string, Shape>> expected = gpt_tensors(model.config);
  std::set<std::string> known;
  for (const auto& [name, weft_shape] : expected) {
    const Shape shape = is_conv1d_weight(name) ? Shape{weft_shape[1], weft_shape[0]} : weft_shape;
    const char* orientation = is_conv1d_weight(name) ? " (Conv1D's [in, out])" : "";
    auto it = by_name.find(name);
    WEFT_CHECK(it != by_name.end(), FormatError, file, ": has no tensor '", name, "' (expected ", shape_str(shape),
               orientation, " for the config's GPT-2)");
    WEFT_CHECK(it->second->shape == shape, FormatError, file, ": '", it->second->name, "' is ",
               shape_str(it->second->shape), ", expected ", shape_str(shape), orientation, " for the config's GPT-2 (",
               model.config.layers, " layers, n_embd ", model.config.dim, ", n_positions ", model.config.context,
               ", vocab_size ", model.config.vocab, ")");
    WEFT_CHECK(is_floating(it->second->dtype), FormatError, file, ": '", it->second->name, "' is ",
               dtype_name(it->second->dtype), "; expected floating-point weights");
    known.insert(name);
  }
  for (const auto& [name, info] : by_name) {
    if (known.contains(name) || name == "lm_head.weight") continue;
    const bool mask = name.starts_with("h.") && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
    WEFT_CHECK(mask, FormatError, file, ": holds '", info->name, "', which is not one of GPT-2's tensors");
  }

  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : safetensors ? io::load_safetensors(file).tensors : io::load_torch_state_dict(file))
    tensors.emplace(name.starts_with(kPrefix) ? name.substr(std::strlen(kPrefix)) : name, t);
  if (auto head = tensors.find("lm_head.weight"); head != tensors.end())
    WEFT_CHECK(same_bytes(head->second, tensors.at("wte.weight")), ValueError, file, ": lm_head.weight differs from ",
               "wte.weight: an output head of its own, which weft's GPT (its head tied to wte) cannot represent");
  std::vector<Tensor> weights;
  for (const auto& [name, shape] : expected) weights.push_back(tensors.at(name));
  const DType dtype = kept_dtype(weights);
  NoGradGuard no_grad;
  for (const auto& [name, shape] : expected) {
    const Tensor& t = tensors.at(name);
    model.weights.insert(name, (is_conv1d_weight(name) ? transposed(t) : t.contiguous()).to(dtype));
  }

  model.tokenizer = std::make_shared<data::Gpt2Tokenizer>(data::Gpt2Tokenizer::load(dir));
  WEFT_CHECK(model.tokenizer->vocab_size() <= model.config.vocab, FormatError, in_dir(dir, "vocab.json"), ": has ",
             model.tokenizer->vocab_size(), " tokens, more than the model's vocab_size of ", model.config.vocab);
  return model;
}

void write_huggingface_gpt2(const Gpt2Model& model, const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  WEFT_CHECK(!error, IOError, "cannot create ", dir, ": ", error.message());
  const nn::GPTConfig& c = model.config;
  const nlohmann::json config = {{"architectures", {"GPT2LMHeadModel"}},
                                 {"model_type", "gpt2"},
                                 {"activation_function", "gelu_new"},
                                 {"n_layer", c.layers},
                                 {"n_head", c.heads},
                                 {"n_embd", c.dim},
                                 {"n_positions", c.context},
                                 {"n_ctx", c.context},
                                 {"vocab_size", c.vocab},
                                 {"layer_norm_epsilon", kLayerNormEpsilon},
                                 {"n_inner", nullptr},
                                 {"resid_pdrop", c.dropout},
                                 {"embd_pdrop", c.dropout},
                                 {"attn_pdrop", 0.0},
                                 {"initializer_range", 0.02},
                                 {"scale_attn_weights", true},
                                 {"tie_word_embeddings", true}};
  const std::string config_text = config.dump(2) + "\n";
  auto write = [](const std::string& path, const std::string& bytes) {
    io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); });
  };
  write(in_dir(dir, kConfigFile), config_text);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : model.weights)
    tensors.emplace_back(kPrefix + name, is_conv1d_weight(name) ? transposed(t) : t);
  io::save_safetensors(in_dir(dir, kWeightsFile), tensors, {{"format", "pt"}});
  write(in_dir(dir, data::Gpt2Tokenizer::kVocabFile), model.tokenizer->vocab_json());
  write(in_dir(dir, data::Gpt2Tokenizer::kMergesFile), model.tokenizer->merges_txt());
}

Gpt2Model read_gpt2_checkpoint(const std::string& path) {
  const SavedGPT saved = read_saved_gpt(path);
  Gpt2Model model;
  model.config = saved.config;
  std::shared_ptr<data::Tokenizer> tokenizer = tokenizer_for(saved, "");
  model.tokenizer = std::dynamic_pointer_cast<data::Gpt2Tokenizer>(tokenizer);
  WEFT_CHECK(model.tokenizer != nullptr, ValueError, path, ": its tokenizer is ", saved.tokenizer,
             ", and GPT-2's layout holds only GPT-2's byte-level BPE (a GPT imported with weft import gpt2, or "
             "trained from one)");
  const Weights weights = load_weights(path);
  const std::string file = model_file(path);
  std::vector<Tensor> tensors;
  for (const auto& [name, shape] : gpt_tensors(model.config)) {
    WEFT_CHECK(weights.state.contains(name), FormatError, file, ": has no tensor '", name, "'");
    const Tensor& t = weights.state.at(name);
    WEFT_CHECK(t.shape() == shape && is_floating(t.dtype()), FormatError, file, ": '", name, "' is ",
               dtype_name(t.dtype()), " ", shape_str(t.shape()), ", expected floating-point ", shape_str(shape));
    tensors.push_back(t);
  }
  WEFT_CHECK(tensors.size() == weights.state.size(), FormatError, file, ": holds ", weights.state.size(),
             " tensors, a GPT of its weft.gpt ", tensors.size());
  const DType dtype = kept_dtype(tensors);
  size_t i = 0;
  for (const auto& [name, shape] : gpt_tensors(model.config)) model.weights.insert(name, tensors[i++].to(dtype));
  return model;
}

void write_gpt2_checkpoint(const Gpt2Model& model, const std::string& dir) {
  io::CheckpointWriter checkpoint(dir, /*step=*/0);
  Metadata metadata = gpt_metadata(model.config, *model.tokenizer);
  metadata.insert({{"format", "pt"}, {"weft.model", nn::model_kind_name(nn::ModelKind::gpt)}});
  io::save_safetensors(in_dir(checkpoint.staging(), kWeightsFile), {model.weights.begin(), model.weights.end()},
                       metadata);
  save_tokenizer(*model.tokenizer, checkpoint.staging());
  checkpoint.commit();
}

}  // namespace weft::infer
