// Registration of weft's subcommands on the CLI11 app. Each add_* registers its subcommands and,
// when one of them is parsed, sets `run` to the function that executes it.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "weft/train/options.h"

namespace weft::cli {

void add_train_commands(CLI::App& app, std::function<void()>& run);  // train, eval, info, ckpt consolidate
void add_dtype_command(CLI::App& app, std::function<void()>& run);   // dtype
void add_plan_command(CLI::App& app, std::function<void()>& run);    // plan
void add_quant_commands(CLI::App& app, std::function<void()>& run);  // quantize
void add_tokenize_commands(CLI::App& app, std::function<void()>& run);  // tokenize train, tokenize encode
void add_generate_command(CLI::App& app, std::function<void()>& run);   // generate
void add_bench_command(CLI::App& app, std::function<void()>& run);      // bench comm
void add_serve_command(CLI::App& app, std::function<void()>& run);      // serve
void add_estimate_command(CLI::App& app, std::function<void()>& run);   // estimate time, cost, comm, --calibrate
void add_smi_command(CLI::App& app, std::function<void()>& run);        // smi
void add_board_command(CLI::App& app, std::function<void()>& run);      // board

// `weft train ARGS`' options, read and checked as the command reads them (a flag that does not
// exist or a value it cannot take → ValueError with the command's message), for a front end that
// runs the trainer itself: weft.train.fit.
train::TrainOptions parse_train_flags(const std::vector<std::string>& args);

// The image data flags of train, eval and quantize (infer::image_data_dir, data/paths.h).
inline constexpr const char* kDataDirHelp =
    "its IDX files, .gz or not (default: /usr/share/datasets/fashion-mnist for fashion-mnist, which Debian's "
    "dataset-fashion-mnist installs, or $WEFT_DATA_DIR/fashion-mnist when WEFT_DATA_DIR is set; mnist has no "
    "package, so it needs this flag)";
inline constexpr const char* kCheckpointDatasetHelp =
    "the data set to read: the checkpoint's (default), or for an older checkpoint that does not record it, "
    "whose files and normalisation to assume (else fashion-mnist)";

}  // namespace weft::cli
