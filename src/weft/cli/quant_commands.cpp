// `weft quantize`: post-training quantization of a checkpoint written by `weft train`.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/program.h"
#include "weft/core/allocator.h"
#include "weft/core/threads.h"
#include "weft/data/sampler.h"
#include "weft/infer/load.h"
#include "weft/infer/metadata.h"
#include "weft/nn/container.h"
#include "weft/quant/checkpoint.h"
#include "weft/quant/ptq.h"
#include "weft/train/options.h"

namespace weft::cli {

namespace {

namespace fs = std::filesystem;

struct QuantizeOptions {
  std::string checkpoint, out;
  bool int8 = false, int4 = false, dynamic = false;
  std::string calibration_flag;  // the first calibration flag given: a GPT takes none
  int64_t calibration_batches = 10, batch_size = 128, group_size = 32;
  std::string observer = "minmax";
  double percentile = 99.99;
  uint64_t seed = 0;
  std::string dataset, data_dir;  // "": the checkpoint's data set, its default directory
  int threads = 0;
  bool json = false, overwrite = false;
};

// The first `count` batches of a seeded shuffle of the training split: the calibration set.
std::vector<Tensor> calibration_batches(const QuantizeOptions& o, const infer::LoadedModel& loaded) {
  data::ImageDataset train_data =
      data::load_mnist_idx(infer::image_data_dir(loaded.dataset, o.data_dir), true, loaded.normalization);
  std::vector<int64_t> order = data::RandomSampler(train_data.size(), o.seed).indices(0);
  std::vector<Tensor> batches;
  const int64_t available = (train_data.size() + o.batch_size - 1) / o.batch_size;
  WEFT_CHECK(o.calibration_batches <= available, ValueError, "--calib: must be at most ", available,
             ", the batches of --batch-size ", o.batch_size, " in the ", train_data.size(), " training images, got '",
             o.calibration_batches, "'");
  for (int64_t b = 0; b < o.calibration_batches; ++b) {
    auto begin = order.begin() + b * o.batch_size;
    auto end = order.begin() + std::min<int64_t>((b + 1) * o.batch_size, train_data.size());
    batches.push_back(train_data.get_batch({begin, end}).inputs);
  }
  return batches;
}

// A GPT: its projections weight-only int8 or int4, written with its tokenizer into the directory
// --out, which weft generate and weft serve take as they take weft train's.
void quantize_gpt(const QuantizeOptions& o, infer::LoadedModel& loaded, const std::string& source) {
  WEFT_CHECK(!o.dynamic && o.calibration_flag.empty(), ValueError,
             o.dynamic ? std::string("--dynamic") : o.calibration_flag,
             ": not for a GPT, whose int8 and int4 are weight-only (its activations stay f32, nothing to calibrate)");
  WEFT_CHECK(o.dataset.empty() && o.data_dir.empty(), ValueError, o.dataset.empty() ? "--data-dir" : "--dataset",
             ": not for a GPT (nothing to calibrate)");
  const fs::path dir(o.out), file = dir / "model.safetensors";
  std::error_code error;
  WEFT_CHECK(!fs::exists(dir, error) || fs::is_directory(dir, error), ValueError, "--out ", o.out,
             ": for a GPT, the directory to write model.safetensors and its tokenizer into; this is a file");
  check_output_file("--out", file.string(), o.overwrite);
  const int bits = o.int4 ? 4 : 8;
  nn::GPT& gpt = *loaded.gpt;
  gpt.to(DType::f32);  // a bf16 checkpoint widens exactly; quantization starts from f32
  const int64_t layers = quant::quantize_linear_weights(gpt, bits, o.group_size);
  std::map<std::string, std::string> metadata = infer::gpt_metadata(gpt.config, *loaded.tokenizer);
  metadata["weft.source"] = source;
  fs::create_directories(dir);
  quant::save_quantized_gpt(file.string(), gpt, bits, o.group_size, metadata);
  infer::save_tokenizer(*loaded.tokenizer, dir.string());

  const std::string scheme = quant::scheme_name(bits == 8 ? quant::Scheme::int8_weight_only : quant::Scheme::int4_weight_only);
  const int64_t f32_bytes = static_cast<int64_t>(fs::file_size(source));
  const int64_t quantized_bytes = static_cast<int64_t>(fs::file_size(file));
  const double ratio = static_cast<double>(f32_bytes) / static_cast<double>(quantized_bytes);
  std::cout << "quantized gpt to " << scheme << ": " << layers << " Linear layers ("
            << (bits == 8 ? std::string("per output channel") : str("groups of ", o.group_size))
            << "), the token embedding and norms f32\n";
  std::printf("file size: %s %s (%lld bytes), %s %s (%lld bytes): %.2fx smaller\n", dtype_name(loaded.dtype),
              format_bytes(f32_bytes).c_str(), static_cast<long long>(f32_bytes), scheme.c_str(),
              format_bytes(quantized_bytes).c_str(), static_cast<long long>(quantized_bytes), ratio);
  std::cout << "written to " << o.out << " (sample it with: " << shell_quote(program_name())
            << " generate --checkpoint " << shell_quote(o.out) << " --prompt ...)\n";
  if (o.json)
    std::cout << nlohmann::json{{"model", "gpt"}, {"quantization", scheme}, {"out", file.string()},
                                {"f32_bytes", f32_bytes}, {"quantized_bytes", quantized_bytes}, {"ratio", ratio}}.dump()
              << "\n";
}

void quantize(const QuantizeOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  const std::string source = infer::model_file(o.checkpoint);
  io::mark_as_input(source);
  infer::LoadedModel loaded = infer::load_model(source, {.dataset = o.dataset});
  WEFT_CHECK(loaded.scheme == "none", ValueError, source, " is already quantized (", loaded.scheme,
             "); quantize the f32 checkpoint that weft train wrote");
  if (loaded.kind == nn::ModelKind::gpt) return quantize_gpt(o, loaded, source);
  check_output_file("--out", o.out, o.overwrite);
  WEFT_CHECK(!infer::saved_classes(loaded.metadata, loaded.file), ValueError, source, " was trained on its own data (",
             loaded.dataset, ", weft train --data); weft quantize quantizes the classifiers of fashion-mnist and mnist");
  if (!loaded.note.empty()) std::cerr << "note: " << loaded.note << "\n";
  auto model = std::dynamic_pointer_cast<nn::Sequential>(loaded.model);
  model->to(DType::f32);  // a bf16 checkpoint widens exactly; quantization starts from f32
  const std::string model_name = nn::model_kind_name(loaded.kind);

  quant::Scheme scheme = o.int4 ? quant::Scheme::int4_weight_only
                                : (o.dynamic ? quant::Scheme::int8_dynamic : quant::Scheme::int8_static);
  std::map<std::string, std::string> metadata = infer::classifier_metadata(loaded.dataset, loaded.normalization);
  const int64_t classes = static_cast<int64_t>(loaded.labels.size());
  if (const auto fractions = infer::saved_class_distribution(loaded.metadata, classes, loaded.file))
    metadata.merge(infer::class_distribution_metadata(*fractions));
  metadata["weft.source"] = source;
  std::shared_ptr<nn::Sequential> quantized;
  std::string how;
  if (scheme == quant::Scheme::int8_static) {
    std::vector<Tensor> batches = calibration_batches(o, loaded);
    quant::CalibrationOptions calibration{o.observer, o.percentile};
    quantized = quant::quantize_static(*model, batches, calibration);
    std::string observer = o.observer == "percentile" ? str("percentile ", o.percentile) : o.observer;
    metadata["weft.observer"] = observer;
    metadata["weft.calibration_batches"] = std::to_string(batches.size());
    metadata["weft.calibration_batch_size"] = std::to_string(o.batch_size);
    how = str(observer, " observer, ", batches.size(), " calibration batches of ", o.batch_size);
  } else if (scheme == quant::Scheme::int8_dynamic) {
    quantized = quant::quantize_dynamic(*model);
    how = "activation ranges measured per batch at run time";
  } else {
    quantized = quant::quantize_int4(*model, o.group_size);
    how = str("Linear weights only, groups of ", o.group_size);
  }
  quant::save_quantized_classifier(o.out, *quantized, model_name, scheme, metadata);

  const int64_t f32_bytes = static_cast<int64_t>(fs::file_size(source));
  const int64_t quantized_bytes = static_cast<int64_t>(fs::file_size(o.out));
  const double ratio = static_cast<double>(f32_bytes) / static_cast<double>(quantized_bytes);
  std::cout << "quantized " << model_name << " to " << quant::scheme_name(scheme) << " (" << how << ")\n";
  for (const auto& [name, child] : quantized->named_children())
    if (!child->named_buffers().empty()) std::cout << "  " << name << ": " << child->name() << "(" << child->extra_repr() << ")\n";
  std::printf("file size: f32 %s (%lld bytes), %s %s (%lld bytes): %.2fx smaller\n", format_bytes(f32_bytes).c_str(),
              static_cast<long long>(f32_bytes), quant::scheme_name(scheme), format_bytes(quantized_bytes).c_str(),
              static_cast<long long>(quantized_bytes), ratio);
  std::cout << "written to " << o.out << " (evaluate with: " << shell_quote(program_name()) << " eval --checkpoint "
            << shell_quote(o.out) << ")\n";
  if (o.json)
    std::cout << nlohmann::json{{"model", model_name}, {"quantization", quant::scheme_name(scheme)},
                                {"out", o.out}, {"f32_bytes", f32_bytes}, {"quantized_bytes", quantized_bytes},
                                {"ratio", ratio}}.dump()
              << "\n";
}

}  // namespace

void add_quant_commands(CLI::App& app, std::function<void()>& run) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* q = app.add_subcommand("quantize", "post-training quantization of a weft train checkpoint (int8 or int4): "
                                   "a classifier's, or a GPT's projections (weight-only)");
  q->add_option("checkpoint,--checkpoint", o->checkpoint, "model.safetensors or the checkpoint directory holding it")
      ->required()->check(not_empty());
  q->add_option("--out", o->out, "the quantized .safetensors file to write; for a GPT, the directory to write it and its "
                "tokenizer into")
      ->required()->check(not_empty());
  q->add_flag("--overwrite", o->overwrite, "replace --out if it exists");
  auto int8 = q->add_flag("--int8", o->int8, "int8 weights per output channel; u8 activations per tensor (a GPT: "
                          "weight-only, f32 activations)");
  auto int4 = q->add_flag("--int4", o->int4, "int4 weights of Linear layers in groups; f32 activations");
  int8->excludes(int4);
  q->add_flag("--dynamic", o->dynamic, "int8: activation scales per batch at run time instead of calibrated");
  const Accepts<int64_t> count{.min = 1, .max = train::kMaxCount};
  // The flags that only static int8 (calibrated) reads, and the one only int4 reads.
  CLI::Option* percentile =
      number_flag(q, "--percentile", o->percentile, "for --observer percentile", {.min = 0, .max = 100, .min_open = true});
  const std::vector<CLI::Option*> calibration = {
      number_flag(q, "--calib", o->calibration_batches, "calibration batches from the training split (static int8)",
                  count),
      q->add_option("--observer", o->observer, "minmax | percentile")
          ->check(one_of({"minmax", "percentile"}))->capture_default_str(),
      percentile,
      number_flag(q, "--batch-size", o->batch_size, "calibration batch size", count),
      number_flag(q, "--seed", o->seed, "which training images calibrate")};
  CLI::Option* group_size = number_flag(q, "--group-size", o->group_size, "int4 group size", count);
  q->add_option("--dataset", o->dataset, kCheckpointDatasetHelp)->check(one_of({"fashion-mnist", "mnist"}));
  q->add_option("--data-dir", o->data_dir, kDataDirHelp);
  number_flag(q, "--threads", o->threads, "0: all cores (or OMP_NUM_THREADS)", {.min = 0, .max = train::kMaxThreads});
  q->add_flag("--json", o->json, "print the result as one JSON object on the last line");
  q->callback([&run, o, calibration, percentile, group_size] {
    WEFT_CHECK(o->int8 != o->int4, ValueError, "weft quantize: pass exactly one of --int8 and --int4");
    WEFT_CHECK(!o->dynamic || o->int8, ValueError, "--dynamic: applies to --int8 only");
    // A value typed for a flag this scheme does not read would be silently ignored.
    const char* scheme = o->int4 ? "--int4" : "--int8 --dynamic";
    for (CLI::Option* option : calibration) {
      WEFT_CHECK(option->count() == 0 || (o->int8 && !o->dynamic), ValueError, option->get_name(),
                 ": is not a flag of ", scheme, " (only static --int8 calibrates)");
      if (option->count() > 0 && o->calibration_flag.empty()) o->calibration_flag = option->get_name();
    }
    WEFT_CHECK(group_size->count() == 0 || o->int4, ValueError, "--group-size: is not a flag of --int8 (only --int4 "
               "groups weights)");
    WEFT_CHECK(o->observer == "percentile" || percentile->count() == 0, ValueError,
               "--percentile: is not a flag of --observer ", o->observer, " (give --observer percentile)");
    run = [o] { quantize(*o); };
  });
}

}  // namespace weft::cli
