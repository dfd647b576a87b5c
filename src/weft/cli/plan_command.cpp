// `weft plan`: memory per device and the strategy for a training setup (src/weft/memory/planner.h).
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "weft/cli/commands.h"
#include "weft/cli/flags.h"
#include "weft/core/allocator.h"
#include "weft/memory/inference.h"
#include "weft/memory/planner.h"
#include "weft/nn/model_kind.h"
#include "weft/train/options.h"

namespace weft::cli {

namespace {

struct PlanFlags {
  std::string model, params;
  nn::GPTConfig gpt;  // weft train --model gpt's defaults
  std::optional<int64_t> batch;  // unset: the model's default per device, times the replicas
  // weft train's defaults: the plan is of the run `weft train` makes unless told otherwise.
  std::string precision = amp::precision_name(train::TrainOptions{}.precision),
              optimizer = optim::optimizer_name(train::TrainOptions{}.optimizer), device = "H100";
  int zero = 0;
  int64_t world = 1, tp = 1, pp = 1, grad_accum = 1;
  std::string pp_schedule = "1f1b";
  bool checkpoint = false, json = false;
  // --inference: serving the model, its weights in `precision` (which takes int8 and int4 too).
  bool inference = false;
  std::string kv_precision;  // empty: the model's compute precision
  int64_t kv_heads = 0;      // 0: the model's heads
  // Which of the description flags were given, to reject contradictions.
  std::vector<std::string> architecture_flags;
};

memory::ModelDescription describe(const PlanFlags& f) {
  const bool has_architecture = !f.architecture_flags.empty();
  const std::string first_architecture_flag = has_architecture ? f.architecture_flags.front() : "";
  if (!f.params.empty()) {
    WEFT_CHECK(f.model.empty(), ValueError, "plan: --model ", f.model,
               " and --params describe the model twice; give one of them");
    WEFT_CHECK(!has_architecture, ValueError, "plan: --params and ", first_architecture_flag,
               " describe the model twice; give a parameter count or the architecture, not both");
    return memory::ModelDescription::parameters_only(memory::parse_parameter_count(f.params));
  }
  if (!f.model.empty() && nn::find_model_kind(f.model) != nn::ModelKind::gpt) {
    WEFT_CHECK(!has_architecture, ValueError, "plan: ", first_architecture_flag, " describes a GPT, but --model ",
               f.model, " is fixed; drop ", first_architecture_flag, " or use --model gpt");
    return memory::ModelDescription::builtin(f.model);
  }
  WEFT_CHECK(!f.model.empty() || has_architecture, ValueError, "plan: no model: give --model ",
             memory::builtin_model_names(), ", --params N, or a GPT's --layers --dim --heads --vocab --context");
  return memory::ModelDescription::gpt(f.gpt);
}

std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string describe_setup(const memory::PlanRequest& r, int64_t per_device_batch) {
  std::string split;
  if (r.tp > 1) split += str(", tensor parallel over ", r.tp);
  if (r.pp > 1) split += str(", ", r.pp, " pipeline stages (", r.pp_schedule, ")");
  if (r.micro_batches > 1) split += str(", ", r.micro_batches, " micro-batches");
  return str(amp::precision_name(r.precision), ", ZeRO-", r.zero, " over ", r.world,
             r.world == 1 ? " device" : " devices", split, " (batch ", r.batch, ", ", per_device_batch,
             r.splits_model() ? " per data-parallel replica)" : " per device)",
             r.checkpoint_activations ? ", activation checkpointing" : "");
}

void print_row(const char* what, int64_t bytes, const std::string& remark) {
  std::printf("  %-26s %20s  %9s  %11s  %s\n", what, grouped(bytes).c_str(), memory::format_decimal_bytes(bytes).c_str(),
              format_bytes(bytes).c_str(), remark.c_str());
}

void print_plan(const memory::ModelDescription& model, const memory::Plan& p) {
  const memory::PlanRequest& r = p.request;
  std::cout << "weft plan: " << model.name() << ", " << grouped(model.num_parameters()) << " parameters\n"
            << "  " << optim::optimizer_name(r.optimizer) << ", " << describe_setup(r, p.per_device_batch) << "\n\n";
  std::printf("  %-26s %20s  %9s  %11s\n", "per device", "bytes", "decimal", "binary");
  print_row("parameters", p.params_bytes, str(p.per_parameter.params, " B/param", r.zero >= 3 ? ", sharded" : ""));
  print_row("gradients", p.grads_bytes, str(p.per_parameter.grads, " B/param", r.zero >= 2 ? ", sharded" : ""));
  print_row("optimizer states", p.optimizer_bytes,
            str(p.per_parameter.optimizer, " B/param", r.zero >= 1 ? ", sharded" : ""));
  if (p.rounding_bytes > 0)
    std::cout << "  (the three rows above include " << memory::format_decimal_bytes(p.rounding_bytes)
              << " of allocator blocks beyond bytes x parameters: each tensor is its own allocation)\n";
  if (p.bucket_bytes > 0)
    print_row(r.zero == 1 ? "ZeRO-1 buckets" : "DDP buckets", p.bucket_bytes, "every gradient copied flat for the all-reduce");
  if (p.gathered_bytes > 0)
    print_row("ZeRO-3 gathered layer", p.gathered_bytes, "one layer's parameters and gradients in full");
  if (p.activations_known) print_row("activations (high-water)", p.activations_bytes, "");
  else std::printf("  %-26s %20s\n", "activations", "unknown");
  print_row("total (peak of the step)", p.total_bytes, "");
  if (!p.stages.empty()) {
    std::cout << "  (the rows above are the largest device's; every device of a stage holds the same)\n\n";
    std::printf("  %-6s %12s %14s %14s %14s %14s %9s %14s\n", "stage", "parameters", "params B", "grads B",
                "optimizer B", "activations B", "in flight", "total B");
    for (const memory::StagePlan& s : p.stages)
      std::printf("  %-6lld %12s %14s %14s %14s %14s %9lld %14s\n", static_cast<long long>(s.stage),
                  grouped(s.parameters).c_str(), grouped(s.params_bytes).c_str(), grouped(s.grads_bytes).c_str(),
                  grouped(s.optimizer_bytes).c_str(), grouped(s.activations_bytes).c_str(),
                  static_cast<long long>(s.in_flight), grouped(s.total_bytes).c_str());
  }
  const int64_t sum =
      p.params_bytes + p.grads_bytes + p.optimizer_bytes + p.bucket_bytes + p.gathered_bytes + p.activations_bytes;
  std::cout << "  peak during " << p.peak_at << "\n";
  if (p.activations_known && p.total_bytes < sum)
    std::cout << "  (" << memory::format_decimal_bytes(sum - p.total_bytes)
              << " below the sum of the rows: the gradients are dropped before the backward and come back as it frees "
                 "activations)\n";
  std::cout << "\ndevice " << p.device.name << ": " << memory::format_decimal_bytes(p.device.memory_bytes) << " ("
            << format_bytes(p.device.memory_bytes) << "), " << p.device.source << "\n";
  if (p.fits) {
    std::printf("fits: yes, %.1f%% of the device\n", 100.0 * p.total_bytes / p.device.memory_bytes);
  } else {
    std::cout << "fits: no, " << memory::format_decimal_bytes(p.total_bytes) << " per device > "
              << memory::format_decimal_bytes(p.device.memory_bytes) << "\n";
    if (p.fits_with) {
      const memory::PlanRequest& f = *p.fits_with;
      std::cout << "fits with: " << describe_setup(f, f.batch / f.replicas()) << ": "
                << memory::format_decimal_bytes(p.fits_with_total_bytes) << " per device\n";
    }
  }
  std::cout << "strategy chart (model size = fp32 weights = "
            << memory::format_decimal_bytes(p.model_size_bytes) << ", row " << p.chart.model_size
            << "): " << p.chart.strategy << "\n";
  for (const std::string& note : p.notes) std::cout << "note: " << note << "\n";
}

nlohmann::json to_json(const memory::ModelDescription& model, const memory::Plan& p) {
  const memory::PlanRequest& r = p.request;
  nlohmann::json fits_with = nullptr;
  if (p.fits_with)
    fits_with = {{"precision", amp::precision_name(p.fits_with->precision)},
                 {"zero", p.fits_with->zero},
                 {"world", p.fits_with->world},
                 {"batch", p.fits_with->batch},
                 {"per_device_batch", p.fits_with->batch / p.fits_with->replicas()},
                 {"checkpoint_activations", p.fits_with->checkpoint_activations},
                 {"total_bytes", p.fits_with_total_bytes}};
  nlohmann::json stages = nlohmann::json::array();
  for (const memory::StagePlan& s : p.stages)
    stages.push_back({{"stage", s.stage},
                      {"parameters", s.parameters},
                      {"in_flight", s.in_flight},
                      {"params_bytes", s.params_bytes},
                      {"grads_bytes", s.grads_bytes},
                      {"optimizer_bytes", s.optimizer_bytes},
                      {"ddp_bucket_bytes", s.bucket_bytes},
                      {"activations_bytes", s.activations_bytes},
                      {"total_bytes", s.total_bytes},
                      {"peak_at", s.peak_at}});
  return {{"model", model.name()},
          {"params", model.num_parameters()},
          {"batch", r.batch},
          {"per_device_batch", p.per_device_batch},
          {"precision", amp::precision_name(r.precision)},
          {"optimizer", optim::optimizer_name(r.optimizer)},
          {"zero", r.zero},
          {"world", r.world},
          {"tp", r.tp},
          {"pp", r.pp},
          {"data_parallel", r.replicas()},
          {"micro_batches", r.micro_batches},
          {"pp_schedule", r.pp_schedule},
          {"stages", stages},
          {"checkpoint_activations", r.checkpoint_activations},
          {"bytes_per_param", {{"params", p.per_parameter.params}, {"grads", p.per_parameter.grads},
                               {"optimizer", p.per_parameter.optimizer}}},
          {"params_bytes", p.params_bytes},
          {"grads_bytes", p.grads_bytes},
          {"optimizer_bytes", p.optimizer_bytes},
          {"gathered_bytes", p.gathered_bytes},
          {"ddp_bucket_bytes", p.bucket_bytes},
          {"allocator_rounding_bytes", p.rounding_bytes},
          {"activations_known", p.activations_known},
          {"activations_bytes", p.activations_bytes},
          {"total_bytes", p.total_bytes},
          {"peak_at", p.peak_at},
          {"device", p.device.name},
          {"device_bytes", p.device.memory_bytes},
          {"device_source", p.device.source},
          {"fits", p.fits},
          {"model_size_bytes", p.model_size_bytes},
          {"strategy", p.chart.strategy},
          {"strategy_row", p.chart.model_size},
          {"fits_with", fits_with},
          {"notes", p.notes}};
}

std::string weights_remark(const memory::InferencePlan& p) {
  const std::string which = p.kv_known ? "Linear weights and wte " : "every weight ",
                    rest = p.kv_known ? "; the rest fp32" : "";
  switch (p.request.weights) {
    case memory::WeightFormat::int8: return which + "1 B + an f32 scale per row" + rest;
    case memory::WeightFormat::int4: return which + "20 B per 32 (5 bits)" + rest;
    default: return str(memory::linear_weight_bytes(p.request.weights, 1, 1), " B/param");
  }
}

void print_inference_plan(const memory::ModelDescription& model, const memory::InferencePlan& p) {
  const memory::InferenceRequest& r = p.request;
  std::cout << "weft plan --inference: " << model.name() << ", " << grouped(model.num_parameters()) << " parameters\n"
            << "  " << memory::weight_format_name(r.weights) << " weights, " << amp::precision_name(p.kv)
            << " KV cache, " << r.batch << (r.batch == 1 ? " sequence" : " sequences");
  if (const auto& c = model.gpt_config()) std::cout << " at context " << c->context;
  std::cout << "\n\n";
  std::printf("  %-26s %20s  %9s  %11s\n", "per device", "bytes", "decimal", "binary");
  print_row("weights", p.weights_bytes, weights_remark(p));
  if (!p.kv_known) {
    std::printf("  %-26s %20s  (give the architecture: --layers --dim --heads --vocab --context)\n", "KV cache", "unknown");
    std::printf("  %-26s %20s\n", "activations", "unknown");
  } else {
    const nn::GPTConfig& c = *model.gpt_config();
    print_row("KV cache", p.kv_cache_bytes,
              str("2 x ", c.layers, " layers x ", p.kv_heads, " KV heads x ", p.head_size, " x ", c.context,
                  " positions x ", r.batch, " x ", p.kv == amp::Precision::fp32 ? 4 : 2, " B"));
    print_row("activations (high-water)", p.activations_bytes,
              p.prefill_bytes >= p.decode_bytes ? std::string("a prompt's prefill at the whole context")
                                                : str("a decode step of ", r.batch));
  }
  print_row("total", p.total_bytes, "");
  if (p.kv_known)
    std::cout << "  (KV cache " << memory::format_decimal_bytes(p.kv_bytes_per_sequence) << " per sequence; prefill "
              << memory::format_decimal_bytes(p.prefill_bytes) << ", decode step "
              << memory::format_decimal_bytes(p.decode_bytes) << ")\n";
  std::cout << "\ndevice " << p.device.name << ": " << memory::format_decimal_bytes(p.device.memory_bytes) << " ("
            << format_bytes(p.device.memory_bytes) << "), " << p.device.source << "\n";
  if (p.fits) std::printf("fits: yes, %.1f%% of the device\n", 100.0 * p.total_bytes / p.device.memory_bytes);
  else
    std::cout << "fits: no, " << memory::format_decimal_bytes(p.total_bytes) << " > "
              << memory::format_decimal_bytes(p.device.memory_bytes) << "\n";
  if (p.kv_known)
    std::cout << "largest batch at this context: " << p.max_batch << (p.max_batch == 1 ? " sequence" : " sequences")
              << "\n";
}

nlohmann::json to_json(const memory::ModelDescription& model, const memory::InferencePlan& p) {
  const std::optional<nn::GPTConfig>& c = model.gpt_config();
  return {{"model", model.name()},
          {"params", model.num_parameters()},
          {"inference", true},
          {"batch", p.request.batch},
          {"context", c ? nlohmann::json(c->context) : nlohmann::json(nullptr)},
          {"precision", memory::weight_format_name(p.request.weights)},
          {"kv_precision", amp::precision_name(p.kv)},
          {"kv_heads", p.kv_heads},
          {"head_size", p.head_size},
          {"quantized_parameters", p.quantized_parameters},
          {"other_parameters", p.other_parameters},
          {"weights_bytes", p.weights_bytes},
          {"kv_known", p.kv_known},
          {"kv_bytes_per_sequence", p.kv_bytes_per_sequence},
          {"kv_cache_bytes", p.kv_cache_bytes},
          {"prefill_bytes", p.prefill_bytes},
          {"decode_bytes", p.decode_bytes},
          {"activations_bytes", p.activations_bytes},
          {"total_bytes", p.total_bytes},
          {"device", p.device.name},
          {"device_bytes", p.device.memory_bytes},
          {"fits", p.fits},
          {"max_batch", p.max_batch}};
}

void plan_inference(const PlanFlags& f) {
  memory::ModelDescription model = describe(f);
  memory::InferenceRequest request{.batch = f.batch.value_or(1),
                                   .weights = memory::parse_weight_format(f.precision),
                                   .kv = std::nullopt,
                                   .kv_heads = f.kv_heads,
                                   .device = f.device};
  if (!f.kv_precision.empty())
    request.kv = amp::parse_precision(f.kv_precision, {{amp::Precision::fp32, amp::Precision::fp16, amp::Precision::bf16}});
  memory::InferencePlan p = memory::make_inference_plan(model, request);
  if (f.json) std::cout << to_json(model, p).dump() << "\n";
  else print_inference_plan(model, p);
}

void plan(const PlanFlags& f) {
  if (f.inference) return plan_inference(f);
  memory::ModelDescription model = describe(f);
  memory::PlanRequest request{.batch = f.batch.value_or(0),
                              .precision = amp::parse_precision(f.precision),
                              .optimizer = optim::parse_optimizer(f.optimizer),
                              .zero = f.zero,
                              .world = f.world,
                              .checkpoint_activations = f.checkpoint,
                              .device = f.device,
                              .tp = f.tp,
                              .pp = f.pp,
                              .micro_batches = f.grad_accum,
                              .pp_schedule = f.pp_schedule};
  memory::Plan p = memory::make_plan(model, request);
  if (f.json) std::cout << to_json(model, p).dump() << "\n";
  else print_plan(model, p);
}

}  // namespace

void add_plan_command(CLI::App& app, std::function<void()>& run) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* c = app.add_subcommand(
      "plan",
      "memory per device for training a model, whether it fits a device, and the strategy chart.\n"
      "Bytes per parameter (params + grads + optimizer), the ZeRO paper's convention:\n"
      "  fp32: 4 + 4 + Adam 8 (m, v) = 16; SGD momentum 4; plain SGD 0\n"
      "  fp16 / bf16 (mixed precision, f32 master weights): 2 + 2 + Adam 12 (master, m, v) = 16; momentum 8; SGD 4\n"
      "  bf16-pure: 2 + 2 + Adam 4 (m, v in bf16) = 8\n"
      "ZeRO --zero 1 shards the optimizer states over the data-parallel replicas (--gpus / (--tp x --pp)), 2 also\n"
      "the gradients, 3 also the parameters (these two not with --tp or --pp).\n"
      "Activations come from the layers' shapes and what weft's ops keep for the backward; the total is the\n"
      "predicted peak of one training step per device. Sizes print in bytes, decimal GB and binary GiB.");
  c->add_option("--model", f->model,
                "mlp | cnn | gpt: the model weft train --model builds, gpt with the flags below as weft train takes "
                "them; gpt2: GPT-2 small (124M parameters)")
      ->check(one_of([] {
        std::vector<std::string> names = nn::model_kind_names();
        names.push_back("gpt2");
        return names;
      }()));
  CLI::Option* params =
      c->add_option("--params", f->params, "or only a parameter count (70e9, 7B, 124M): no activations");
  const std::vector<CLI::Option*> architecture = {
      number_flag(c, "--layers", f->gpt.layers, "GPT: transformer blocks", {.min = 1, .max = nn::kMaxGptLayers}),
      number_flag(c, "--dim,--hidden", f->gpt.dim, "GPT: model width", {.min = 1, .max = memory::kMaxPlanCount}),
      number_flag(c, "--heads", f->gpt.heads, "GPT: attention heads (must divide --dim)",
                  {.min = 1, .max = memory::kMaxPlanCount}),
      number_flag(c, "--vocab", f->gpt.vocab, "GPT: vocabulary size (weft train's byte tokenizer's; a SentencePiece "
                  "model's is its --vocab)", {.min = 1, .max = memory::kMaxPlanCount}),
      number_flag(c, "--context,--seq", f->gpt.context, "GPT: sequence length trained on",
                  {.min = 1, .max = memory::kMaxPlanCount})};
  number_flag(
      c, "--batch-size,--batch", f->batch, "global batch, split over --gpus (default: 128 images or 8 sequences per device)",
      {.min = 1, .max = memory::kMaxPlanCount});
  c->add_option("--precision", f->precision,
                "fp32 | fp16 | bf16 (mixed, f32 master weights) | bf16-pure; under --inference the weights': fp32 | "
                "fp16 | bf16 | int8 | int4")
      ->capture_default_str();
  const std::vector<CLI::Option*> training_only = {
      c->add_option("--optimizer", f->optimizer, "adamw | adam | momentum (SGD with momentum) | sgd")->capture_default_str(),
      number_flag(c, "--zero", f->zero, "ZeRO stage 0-3", {.min = 0, .max = 3}),
      number_flag(c, kGpusFlag, f->world, "devices: data-parallel replicas x --tp x --pp",
                  {.min = 1, .max = memory::kMaxWorld}),
      number_flag(c, "--tp", f->tp, "GPT: tensor-parallel ranks (heads, MLP and vocabulary split)",
                  {.min = 1, .max = memory::kMaxWorld}),
      number_flag(c, "--pp", f->pp, "GPT: pipeline stages (blocks split)", {.min = 1, .max = memory::kMaxWorld}),
      number_flag(c, "--grad-accum", f->grad_accum, "micro-batches per step (a pipeline's are these)",
                  {.min = 1, .max = memory::kMaxPlanCount}),
      c->add_option("--pp-schedule", f->pp_schedule, "1f1b | gpipe")->check(one_of({"1f1b", "gpipe"}))->capture_default_str(),
      c->add_flag("--checkpoint-activations", f->checkpoint, "keep only block inputs, recompute blocks in the backward")};
  c->add_flag("--inference", f->inference,
              "plan serving instead of training: weights (int8 and int4 too) + KV cache (2 x layers x KV heads x head "
              "size x context x batch x bytes) + a forward's activations; --batch-size is the sequences decoded "
              "together (default 1), each holding the whole --context");
  const std::vector<CLI::Option*> inference_only = {
      c->add_option("--kv-precision", f->kv_precision,
                    "--inference: the KV cache's fp32 | fp16 | bf16 (default: fp32 for fp32 weights, bf16 for bf16, "
                    "else fp16)")
          ->check(one_of({"fp32", "fp16", "bf16"})),
      number_flag(c, "--kv-heads", f->kv_heads,
                  "--inference: KV heads, for grouped-query attention (Llama 2 70B: 8 for 64 heads; default: --heads)",
                  {.min = 1, .max = memory::kMaxPlanCount})};
  c->add_option("--device,--gpu", f->device, memory::device_names())->capture_default_str();
  c->add_flag("--json", f->json, "print the plan as one JSON object on the last line");
  c->callback([&run, f, architecture, params, training_only, inference_only] {
    if (params->count() > 0) memory::parse_parameter_count(f->params);
    for (CLI::Option* option : f->inference ? training_only : inference_only)
      WEFT_CHECK(option->count() == 0, ValueError, option->get_name(), ": ",
                 f->inference ? "plans training, not with --inference" : "plans serving: add --inference");
    if (f->inference) memory::parse_weight_format(f->precision);
    for (CLI::Option* option : architecture)
      if (option->count() > 0) f->architecture_flags.push_back(option->get_name());
    run = [f] { plan(*f); };
  });
}

}  // namespace weft::cli
