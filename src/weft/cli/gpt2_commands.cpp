// `weft import gpt2` and `weft export gpt2`: GPT-2 checkpoints in Hugging Face's layout
// (src/weft/infer/huggingface_gpt2.h).
#include <filesystem>
#include <iostream>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/program.h"
#include "weft/infer/huggingface_gpt2.h"
#include "weft/infer/metadata.h"
#include "weft/io/atomic_file.h"
#include "weft/io/input_file.h"

namespace weft::cli {

namespace {

namespace fs = std::filesystem;

struct Gpt2Flags {
  std::string source, out;
  bool overwrite = false;
};

// --out is a directory here: one that exists is replaced only when asked.
void check_output_directory(const std::string& out, bool overwrite) {
  std::error_code error;
  const bool exists = fs::exists(fs::symlink_status(out, error)) || fs::exists(out, error);
  WEFT_CHECK(overwrite || !exists, ValueError, "--out ", out, ": exists already; pass --overwrite to replace it");
  WEFT_CHECK(!exists || io::is_directory(out), ValueError, "--out ", out, ": is not a directory");
}

void mark_inputs(const std::string& dir) {
  for (const char* name : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    io::mark_as_input((fs::path(dir) / name).string());
}

std::string described(const infer::Gpt2Model& model) {
  const nn::GPTConfig& c = model.config;
  return str(c.layers, " layers, ", c.heads, " heads, dim ", c.dim, ", context ", c.context, ", vocab ", c.vocab,
             "; tokenizer ", model.tokenizer->identity());
}

void import_gpt2(const Gpt2Flags& f) {
  check_output_directory(f.out, f.overwrite);
  mark_inputs(f.source);
  const infer::Gpt2Model model = infer::read_huggingface_gpt2(f.source);
  infer::write_gpt2_checkpoint(model, f.out);
  std::cout << "imported GPT-2 (" << described(model) << ") into " << f.out << "\n"
            << "generate with: " << shell_quote(program_name()) << " generate --checkpoint " << shell_quote(f.out)
            << " --prompt 'Hello'\n";
}

void export_gpt2(const Gpt2Flags& f) {
  check_output_directory(f.out, f.overwrite);
  const infer::Gpt2Model model = infer::read_gpt2_checkpoint(f.source);
  mark_inputs(infer::read_saved_gpt(f.source).dir);
  infer::write_huggingface_gpt2(model, f.out);
  std::cout << "exported GPT-2 (" << described(model) << ") to " << f.out
            << " (config.json, model.safetensors, vocab.json, merges.txt)\n";
}

}  // namespace

void add_gpt2_commands(CLI::App& app, std::function<void()>& run) {
  CLI::App* import = app.add_subcommand("import", "bring a model from another layout into a weft checkpoint");
  import->require_subcommand(1);
  auto in = std::make_shared<Gpt2Flags>();
  CLI::App* i = import->add_subcommand("gpt2", "a GPT-2 in Hugging Face's layout (config.json, model.safetensors, "
                                                "vocab.json, merges.txt) into a weft GPT checkpoint directory");
  i->add_option("dir", in->source, "the Hugging Face directory")->required()->check(not_empty());
  i->add_option("--out", in->out, "the checkpoint directory to write (weft generate --checkpoint reads it)")
      ->required()->check(not_empty());
  i->add_flag("--overwrite", in->overwrite, "replace --out if it exists");
  i->callback([&run, in] { run = [in] { import_gpt2(*in); }; });

  CLI::App* exporting = app.add_subcommand("export", "write a weft checkpoint in another layout");
  exporting->require_subcommand(1);
  auto out = std::make_shared<Gpt2Flags>();
  CLI::App* e = exporting->add_subcommand("gpt2", "a weft GPT with GPT-2's tokenizer into Hugging Face's layout");
  e->add_option("checkpoint", out->source, "the checkpoint directory (weft import gpt2 --out, weft train --out)")
      ->required()->check(not_empty());
  e->add_option("--out", out->out, "the directory to write config.json, model.safetensors, vocab.json and "
                "merges.txt into")->required()->check(not_empty());
  e->add_flag("--overwrite", out->overwrite, "replace --out if it exists");
  e->callback([&run, out] { run = [out] { export_gpt2(*out); }; });
}

}  // namespace weft::cli
