// GPT-2 checkpoints in Hugging Face's layout, in and out of weft (`weft import gpt2`, `weft
// export gpt2`). A Hugging Face GPT-2 directory holds
//
//   config.json        n_layer, n_head, n_embd, n_positions (older files: n_ctx), vocab_size,
//                      layer_norm_epsilon, activation_function, ...
//   model.safetensors  wte.weight, wpe.weight, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2,
//   (or pytorch_model.bin, torch.save's zip)
//                      mlp.c_fc, mlp.c_proj}.{weight, bias}, ln_f.{weight, bias}, with or without
//                      the prefix "transformer."; the four projections' weights as Conv1D stores
//                      them, [in, out]; optionally lm_head.weight (the head, tied to wte.weight)
//                      and the attention's mask buffers h.N.attn.bias / h.N.attn.masked_bias
//   vocab.json, merges.txt   the byte-level BPE tokenizer (data/tokenizer.h's Gpt2Tokenizer)
//
// weft's GPT is GPT-2's architecture with the same parameter names (nn/gpt.h): only the four
// projections' weights are transposed (weft's Linear stores [out, in]). What it cannot represent
// is refused, one line saying what: a layer-norm epsilon other than 1e-5, an activation other than
// GELU's tanh form (gelu_new, gelu_pytorch_tanh), an MLP width other than 4 * n_embd, attention
// not scaled by 1 / sqrt(head dim) or scaled by layer, cross-attention, a head not tied to the
// token embedding (lm_head.weight must equal wte.weight bit for bit). Dropout is not imported
// (weft's GPT has one rate, set when training).
//
// A weft checkpoint of a GPT-2 is what `weft train --model gpt --out DIR` writes for a GPT
// (infer/metadata.h): DIR/latest -> step-00000000 with model.safetensors (weft.model gpt,
// weft.gpt, weft.tokenizer gpt2-bpe:...) and the tokenizer's vocab.json and merges.txt beside it,
// which weft generate, serve, info and train --init-from read. It holds no optimizer or trainer
// state: it starts runs, it does not resume one.
//
// Weights keep their dtype where weft runs it (f32, bf16); f16 and f64 become f32. Reading checks
// everything (every tensor's name, shape and dtype, the config, both tokenizer files) before
// anything is written, so a refused import or export writes nothing: FormatError for a file that
// is malformed or does not fit the config, IOError for one that cannot be read, ValueError for a
// model weft's GPT cannot represent. Import, export and import again give the same checkpoint,
// byte for byte.
#pragma once
#include <memory>
#include <string>

#include "weft/data/tokenizer.h"
#include "weft/nn/gpt.h"
#include "weft/nn/module.h"

namespace weft::infer {

// A GPT-2 as weft holds it: weights under weft's names ("h.0.attn.c_attn.weight", [out, in]).
struct Gpt2Model {
  nn::GPTConfig config;
  nn::StateDict weights;
  std::shared_ptr<data::Gpt2Tokenizer> tokenizer;
};

// DIR in Hugging Face's layout. Without model.safetensors, the weights are read from PyTorch's
// pytorch_model.bin (io/torch_checkpoint.h: its pickle interpreted, never run).
Gpt2Model read_huggingface_gpt2(const std::string& dir);
// Writes config.json, model.safetensors (names with "transformer.", Conv1D's orientation, no
// lm_head.weight: it is wte.weight), vocab.json and merges.txt into DIR, creating it.
void write_huggingface_gpt2(const Gpt2Model& model, const std::string& dir);

// A weft GPT checkpoint (DIR or its model.safetensors) whose tokenizer is GPT-2's: another
// tokenizer → ValueError (GPT-2's layout has no place for it).
Gpt2Model read_gpt2_checkpoint(const std::string& path);
// Writes a weft checkpoint directory DIR (io/checkpoint_dir.h), creating it; an existing one's
// current checkpoint is replaced as a save replaces it.
void write_gpt2_checkpoint(const Gpt2Model& model, const std::string& dir);

}  // namespace weft::infer
