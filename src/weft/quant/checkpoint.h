// Quantized checkpoints: a quantized built-in classifier (`weft quantize`) as one safetensors file,
// and the way back to a runnable model (`weft eval`).
//
// The tensors are the quantized model's state dict, keyed like the f32 model's ("1.weight", ...):
// for each quantized layer the buffers quant/linear.h and quant/conv.h list (i8 or packed-int4
// weights, their f32 scales, the f32 bias, and for static int8 the input's f32 scale and i32 zero
// point); layers left in f32 keep their f32 weight and bias. The metadata says what it is:
//
//   format               pt
//   weft.model           mlp | cnn        (the architecture: layer types, strides, paddings)
//   weft.quantization    int8-static | int8-dynamic | int4-weight-only (a GPT: int8-weight-only |
//                        int4-weight-only, save_quantized_gpt below)
//   weft.weights         how weights were quantized, in words
//   weft.activations     how activations are quantized, in words
//   weft.int4_group_size the group size (int4 only; required there)
//   ...                  anything the caller adds (observer, calibration batches)
//
// Loading checks the whole file against the architecture before building anything: a missing
// tensor (a scale, say), a wrong dtype or shape, an unexpected tensor, a missing or unknown
// weft.quantization, or an invalid scale or zero point is a FormatError naming the file, the
// tensor and what was expected.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "weft/nn/container.h"

namespace weft::quant {

// int8_weight_only is a GPT's (its projections: quant::quantize_linear_weights); the others a
// classifier's, and int4_weight_only a GPT's too.
enum class Scheme { int8_static, int8_dynamic, int4_weight_only, int8_weight_only };
const char* scheme_name(Scheme scheme);  // "int8-static", ...

void save_quantized_classifier(const std::string& path, const nn::Sequential& model, const std::string& model_name,
                               Scheme scheme, const std::map<std::string, std::string>& extra_metadata = {});

// Whether `path` (a .safetensors file, or a checkpoint directory holding model.safetensors) says
// it is quantized. Reads only the header; IOError / FormatError when it cannot.
bool is_quantized_checkpoint(const std::string& path);

struct QuantizedClassifier {
  std::shared_ptr<nn::Sequential> model;
  std::string model_name;
  Scheme scheme = Scheme::int8_static;
  std::map<std::string, std::string> metadata;
};
QuantizedClassifier load_quantized_classifier(const std::string& path);

// A GPT whose projections are weight-only int8 or int4 (quant::quantize_linear_weights, bits 8 or
// 4 and `group_size`): its state dict under `metadata` (the GPT's own: weft.model, weft.gpt,
// weft.tokenizer) with weft.quantization and, for int4, weft.int4_group_size.
void save_quantized_gpt(const std::string& path, const nn::Module& model, int bits, int64_t group_size,
                        std::map<std::string, std::string> metadata);
// What a GPT file's metadata says of its quantization: nothing (f32 or bf16 weights), or the bits
// and group size to quantize a GPT with before loading the file into it. A scheme a GPT cannot
// have (int8-static, int8-dynamic, an unknown one) or a bad group size → FormatError.
struct GptQuantization {
  int bits = 8;
  int64_t group_size = 0;  // int4's
  Scheme scheme = Scheme::int8_weight_only;
};
std::optional<GptQuantization> gpt_quantization(const std::map<std::string, std::string>& metadata,
                                                const std::string& path);

}  // namespace weft::quant
