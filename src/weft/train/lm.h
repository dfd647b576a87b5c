// A GPT checkpoint for inference: DIR (or DIR/model.safetensors) as `weft train --model gpt --out
// DIR` writes it. The model is rebuilt from the file's metadata. `tokenizer_spec` "" takes the
// checkpoint's own tokenizer (byte, or the SentencePiece model saved as DIR/tokenizer.model);
// any other tokenizer must be the one the model was trained with (ValueError naming both).
#pragma once
#include <memory>
#include <string>

#include "weft/data/tokenizer.h"
#include "weft/nn/gpt.h"

namespace weft::train {

struct GPTCheckpoint {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
};
GPTCheckpoint load_gpt_checkpoint(const std::string& path, const std::string& tokenizer_spec = "");

}  // namespace weft::train
