// The training loop behind `weft train --model gpt`: a GPT (nn/gpt.h) learning to predict the
// next token of a text corpus (docs/gpt.md).
//
// Data. The text files are read as documents, split by document into training and validation
// (data/text.h), and tokenized in memory. `--data random` instead draws uniform random tokens (a
// benchmark input: there is nothing to learn, and no bytes to measure bits per byte against).
//
// Steps. Step s trains on batch_size windows of `context` tokens at starts drawn uniformly by a
// ReplacementSampler seeded from (seed, s), so the batches are a pure function of the step: a run
// resumed at any step continues bit-identically, and no epoch needs to end before a checkpoint.
// An "epoch" is as many windows as the training tokens would fill end to end (tokens / context).
// The run lasts --steps, or --epochs of that size, or until --time-limit; given a time limit
// alone, the first steps' speed sets the step count (written into the checkpoint, so a resumed
// run keeps the same schedule), and the limit still stops the run if it is exceeded.
//
// Losses are natural-log cross-entropy per token (nats); bits per byte is the validation loss
// converted to bits and spread over the bytes the validation tokens decode to, which makes
// tokenizers comparable. The unigram baseline is the cross-entropy of the validation tokens
// under the training tokens' frequencies (add-one smoothed): what a model that ignores context
// would reach.
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/data/tokenizer.h"
#include "weft/nn/gpt.h"

namespace weft::train {

struct LMOptions {
  // The architecture. 0 means: from the checkpoint when resuming, otherwise the default below
  // (vocab: the tokenizer's). Defaults: 4 layers, 4 heads, width 128, context 128 (0.83M
  // parameters with the byte tokenizer).
  nn::GPTConfig model{.layers = 0, .heads = 0, .dim = 0, .context = 0, .vocab = 0};
  std::string tokenizer;           // "byte" or a SentencePiece model file; "": the checkpoint's when resuming, else byte
  std::vector<std::string> data;   // text files or directories (default: the fortunes), or {"random"}
  double val_fraction = 0.05;      // of the documents
  int64_t batch_size = 16;         // windows per step
  int64_t steps = 0;               // 0: from --epochs or --time-limit
  double epochs = 0;               // may be fractional
  double time_limit = 0;           // seconds of training (evaluation included); 0: none
  double lr = 2e-3;                // AdamW, betas (0.9, 0.95), weight decay 0.1 on every parameter
  double weight_decay = 0.1;
  std::string schedule = "cosine"; // cosine: linear warmup, then down to zero at the last step | constant
  int64_t warmup = -1;             // cosine's warmup steps; -1: 10% of the steps, at most 100
  double clip_grad = 1.0;          // the gradients' total norm; 0: off
  uint64_t seed = 0;
  int threads = 0;
  std::string out_dir;             // "": no checkpoint or logs
  std::string resume_dir;
  int64_t log_every = 50;
  int64_t eval_every = 0;          // steps between validations (and checkpoints with --out); 0: only at the end
  int64_t eval_windows = 0;        // validation windows per evaluation; 0: all of them
  std::string precision = "fp32";  // fp32 | bf16 | fp16, as for the classifiers (train/trainer.h)
  int64_t grad_accum = 1;
  bool checkpoint_activations = false;  // each block but the last recomputed in backward
  bool auto_batch = false;
  int64_t memory_limit = 0;

  nlohmann::json to_json() const;
};

struct LMResult {
  int64_t params = 0, steps = 0, tokens = 0;  // tokens trained on, this run
  double train_loss = 0;                      // mean over the last logging window, nats per token
  double val_loss = 0;                        // nats per token
  double val_bits_per_byte = 0;               // NaN for --data random
  double unigram_bits_per_byte = 0;           // NaN for --data random
  double train_tokens_per_s = 0;              // training steps only (no evaluation, no checkpointing)
  double wall_s = 0;
  int64_t peak_allocated_bytes = 0, peak_rss_bytes = 0;
  int64_t micro_batch = 0;
  int64_t skipped_steps = 0;
  double loss_scale = 0;
  bool hit_time_limit = false;
  nn::GPTConfig model;       // as trained
  std::string tokenizer;     // its identity
};

LMResult train_language_model(const LMOptions& options, std::ostream& log, bool interactive);

}  // namespace weft::train
