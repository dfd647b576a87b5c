// Post-training quantization of a Sequential model (the built-in MLP and CNN, or any Sequential
// of Linear, Conv2d and parameter-free layers such as ReLU, MaxPool2d, Flatten).
//
// quantize_static calibrates, then converts: it runs the calibration batches through the f32
// model (eval mode, no autograd), with an observer on the input of every Linear and Conv2d,
// and returns a new Sequential in which each of those is replaced by QuantizedLinear /
// QuantizedConv2d (weights int8 per output channel, inputs u8 with the observed range). The
// other children are shared with the original, which is left unchanged.
//
// quantize_dynamic replaces every Linear by DynamicQuantizedLinear (no calibration; as torch's
// quantize_dynamic, convolutions stay f32); quantize_int4 replaces every Linear by Int4Linear.
//
// A child that has parameters but is neither Linear nor Conv2d (BatchNorm, a nested model)
// cannot be converted: ValueError naming it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "weft/nn/container.h"

namespace weft::quant {

struct CalibrationOptions {
  std::string observer = "minmax";  // minmax | percentile
  double percentile = 99.99;        // for the percentile observer
};

std::shared_ptr<nn::Sequential> quantize_static(const nn::Sequential& model, const std::vector<Tensor>& batches,
                                                const CalibrationOptions& options = {});
std::shared_ptr<nn::Sequential> quantize_dynamic(const nn::Sequential& model);
std::shared_ptr<nn::Sequential> quantize_int4(const nn::Sequential& model, int64_t group_size = 32);

// Weight-only quantization of any model, in place: every nn::Linear anywhere in it (a GPT's
// attention and MLP projections) becomes an Int8WeightOnlyLinear (bits 8) or an Int4Linear in
// groups of group_size (bits 4), in its place and under its name. Embeddings, norms and the
// rest stay as they are (a GPT's output projection is its token embedding: it stays f32).
// Returns how many layers it replaced; bits other than 8 and 4 → ValueError.
int64_t quantize_linear_weights(nn::Module& model, int bits, int64_t group_size = 32);

}  // namespace weft::quant
