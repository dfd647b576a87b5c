// `weft`: one command line for everything weft does. Each subcommand lives in its own file and
// only parses flags, calls the layers below, and prints. Errors a user can cause (bad flags, bad
// files, bad values) print one line on stderr and exit with status 2; anything else is a bug
// and exits with 1. A bad value reads "weft: --flag: must be ..., got '...'" (core/flag_value.h);
// an unknown command or flag names the closest known ones and the help of the command it was given to.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <new>

#include "weft/cli/commands.h"
#include "weft/core/error.h"
#include "weft/core/program.h"
#include "weft/core/suggest.h"
#include "weft/dist/world.h"
#include "weft/train/stop_signals.h"

namespace {

// The whole line in one write: the ranks of an MPI launch share one stderr, and a line written in
// pieces interleaves with another rank's.
std::string error_line(const std::string& message) { return "weft: " + message + "\n"; }

std::string version() {
  return std::string("weft ") + WEFT_VERSION + (std::string(WEFT_GIT_COMMIT).empty() ? "" : " (git " WEFT_GIT_COMMIT ")");
}

// --help shows a flag by its canonical name, its first long one, and the older spellings it still
// takes after its description: "--gpus INT  devices training together (also --count)".
class CanonicalNames : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* option, bool positional) const override {
    if (positional) return Formatter::make_option_name(option, positional);
    std::string shown;
    for (const std::string& name : CLI::detail::split(Formatter::make_option_name(option, positional), ','))
      if (!is_alias(option, name)) shown += (shown.empty() ? "" : ",") + name;
    return shown;
  }
  std::string make_option_desc(const CLI::Option* option) const override {
    const std::vector<std::string>& names = option->get_lnames();
    std::string aliases;
    for (size_t i = 1; i < names.size(); ++i) aliases += (i == 1 ? "" : ", ") + ("--" + names[i]);
    return option->get_description() + (aliases.empty() ? "" : " (also " + aliases + ")");
  }

 private:
  static bool is_alias(const CLI::Option* option, const std::string& name) {
    const std::vector<std::string>& names = option->get_lnames();
    const std::string bare = name.rfind("--", 0) == 0 ? name.substr(2, name.find('{') - 2) : "";
    return std::find(names.begin() + std::min<size_t>(1, names.size()), names.end(), bare) != names.end();
  }
};

// "weft ckpt consolidate": the command's name as typed, for "see ... --help".
std::string command_path(const CLI::App* command) {
  std::string path = command->get_name();
  for (const CLI::App* parent = command->get_parent(); parent; parent = parent->get_parent())
    path = parent->get_name() + " " + path;
  return path;
}

std::string unknown_command(const CLI::App* parent, const std::string& name) {
  std::vector<std::string> known;
  for (const CLI::App* command : parent->get_subcommands([](const CLI::App*) { return true; }))
    known.push_back(command->get_name());
  const std::string path = command_path(parent);  // "weft bench": names read "bench comm"
  const std::string prefix = parent->get_parent() ? path.substr(path.find(' ') + 1) + " " : "";
  std::vector<std::string> close;
  for (const std::string& command : weft::closest_names(name, known)) close.push_back("'" + prefix + command + "'");
  return "unknown command '" + prefix + name + "'" + weft::did_you_mean(close) + " (see " + path + " --help)";
}

// What users of PyTorch, DeepSpeed, Megatron-LM and Hugging Face call the flags weft names
// otherwise (in name_key's form); an unknown flag among them suggests weft's, where the command has it.
const std::map<std::string, std::vector<std::string>> kFlagSynonyms = {
    {"learningrate", {"--lr"}},
    {"bs", {"--batch-size"}},
    {"globalbatchsize", {"--batch-size"}},
    {"trainbatchsize", {"--batch-size"}},
    {"wd", {"--weight-decay"}},
    {"gradientaccumulationsteps", {"--grad-accum"}},
    {"gradientaccumulation", {"--grad-accum"}},
    {"accumulationsteps", {"--grad-accum"}},
    {"maxsteps", {"--steps"}},
    {"trainiters", {"--steps"}},
    {"iterations", {"--steps"}},
    {"numtrainepochs", {"--epochs"}},
    {"lrscheduler", {"--schedule"}},
    {"lrschedule", {"--schedule"}},
    {"lrdecaystyle", {"--schedule"}},
    {"scheduler", {"--schedule"}},
    {"warmupsteps", {"--warmup"}},
    {"lrwarmupiters", {"--warmup"}},
    {"maxgradnorm", {"--clip-grad"}},
    {"gradientclipping", {"--clip-grad"}},
    {"outputdir", {"--out"}},
    {"output", {"--out"}},
    {"save", {"--out"}},
    {"savedir", {"--out"}},
    {"load", {"--resume", "--checkpoint"}},
    {"resumefromcheckpoint", {"--resume"}},
    {"ckpt", {"--checkpoint"}},
    {"modelpath", {"--checkpoint"}},
    {"weights", {"--checkpoint"}},
    {"numgpus", {"--gpus"}},
    {"ngpus", {"--gpus"}},
    {"nprocpernode", {"--gpus"}},
    {"worldsize", {"--gpus"}},
    {"devices", {"--gpus"}},
    {"tensormodelparallelsize", {"--tp"}},
    {"tensorparallelsize", {"--tp"}},
    {"pipelinemodelparallelsize", {"--pp"}},
    {"pipelineparallelsize", {"--pp"}},
    {"zerostage", {"--zero"}},
    {"numlayers", {"--layers"}},
    {"nlayer", {"--layers"}},
    {"numattentionheads", {"--heads"}},
    {"numheads", {"--heads"}},
    {"nhead", {"--heads"}},
    {"hiddensize", {"--dim"}},
    {"dmodel", {"--dim"}},
    {"nembd", {"--dim"}},
    {"seqlength", {"--context"}},
    {"seqlen", {"--context"}},
    {"maxseqlen", {"--context"}},
    {"blocksize", {"--context"}},
    {"contextlength", {"--context"}},
    {"vocabsize", {"--vocab"}},
    {"numthreads", {"--threads"}},
    {"nthreads", {"--threads"}},
    {"dtype", {"--precision"}},
    {"amp", {"--precision"}},
    {"mixedprecision", {"--precision"}},
    {"gradientcheckpointing", {"--checkpoint-activations"}},
    {"activationcheckpointing", {"--checkpoint-activations"}},
    {"recomputeactivations", {"--checkpoint-activations"}},
};

std::string unknown_flag(const CLI::App* command, const std::string& given) {
  const std::string flag = given.substr(0, given.find('='));
  std::map<std::string, std::string> canonical;  // every long name of the command's flags -> its first
  std::vector<std::string> known;
  for (const CLI::Option* option : command->get_options())
    for (const std::string& name : option->get_lnames()) {
      canonical["--" + name] = "--" + option->get_lnames().front();
      known.push_back("--" + name);
    }
  std::vector<std::string> close;
  auto suggest = [&](const std::string& name) {
    if (canonical.contains(name) && std::find(close.begin(), close.end(), canonical[name]) == close.end())
      close.push_back(canonical[name]);
  };
  if (auto synonyms = kFlagSynonyms.find(weft::name_key(flag)); synonyms != kFlagSynonyms.end())
    for (const std::string& name : synonyms->second) suggest(name);
  for (const std::string& name : weft::closest_names(flag, known)) suggest(name);
  return "unknown flag " + flag + weft::did_you_mean(close) + " (see " + command_path(command) + " --help)";
}

// CLI11's message for a command line it could not parse, in terms of the command it got to: an
// unknown command or flag with the closest known ones, and that command's help.
std::string parse_error(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  const std::vector<std::string> left = command->remaining();
  const bool takes_command = !command->get_subcommands([](const CLI::App*) { return true; }).empty();
  if (!left.empty() && takes_command && left.front()[0] != '-') return unknown_command(command, left.front());
  for (const std::string& argument : left)
    if (argument.size() > 1 && argument[0] == '-') return unknown_flag(command, argument);
  if (!left.empty()) return "unexpected argument '" + left.front() + "' (see " + command_path(command) + " --help)";
  if (takes_command && command->get_require_subcommand_min() > 0) {
    std::string names;
    for (const CLI::App* sub : command->get_subcommands([](const CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    return "a command is needed after '" + command_path(command) + "': " + names + " (see " + command_path(command) +
           " --help)";
  }
  return std::string(e.what()) + " (see " + command_path(command) + " --help)";
}

void add_help_and_version(CLI::App& app, std::function<void()>& run) {
  app.set_version_flag("--version", version(), "print weft's version and exit");
  CLI::App* v = app.add_subcommand("version", "print weft's version (as weft --version)");
  v->callback([&run] { run = [] { std::cout << version() << "\n"; }; });
  auto names = std::make_shared<std::vector<std::string>>();
  CLI::App* help = app.add_subcommand("help", "print the help of weft or of a command: weft help train");
  help->add_option("command", *names, "a command and its subcommands: train, ckpt consolidate");
  help->callback([&app, &run, names] {
    CLI::App* command = &app;
    for (const std::string& name : *names) {
      CLI::App* sub = nullptr;
      for (CLI::App* candidate : command->get_subcommands([](CLI::App*) { return true; }))
        if (candidate->get_name() == name) sub = candidate;
      if (!sub) throw weft::ValueError(unknown_command(command, name));
      command = sub;
    }
    run = [command] {
      std::cout << command->get_formatter()->make_help(command, command_path(command), CLI::AppFormatMode::Normal);
    };
  });
}

// The command's exit status: 0, 2 for anything the user can fix (one line saying what), 1 for a
// defect of weft's own. A value refused where it is parsed (cli/flags.h) reads as every other refusal.
int run_command(CLI::App& app, const std::function<void()>& run, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    // The deepest command parsed ("weft bench comm"): ranks running different ones would wait on
    // each other's collectives (or MPI_Init) for ever.
    const CLI::App* command = &app;
    while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
    weft::dist::agree_on_command(command_path(command));
    run();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ValidationError& e) {
    std::cerr << error_line(e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << error_line(parse_error(app, e));
    return 2;
  } catch (const weft::Error& e) {
    std::cerr << error_line(e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // The last net for a path call that readers do not wrap: it is always about a path from the
    // user's environment (a symlink loop, a name too long, no permission), and names it.
    std::cerr << error_line(e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // Memory the system would not give (a ulimit, or a request past what is there) is the
    // machine's limit, not a defect; weft's own allocator says more where it is the one refusing.
    std::cerr << error_line("out of memory: the system refused an allocation; ask for less (a smaller --batch-size, "
                            "say), or set --memory-limit where the command has it, so that weft refuses before asking");
    return 2;
  } catch (const std::exception& e) {
    std::cerr << error_line(std::string("internal error: ") + e.what());
    return 1;
  }
  return 0;
}

// How long a rank that failed alone waits for MPI_Finalize before leaving without it.
constexpr int kStuckRankGraceSeconds = 10;

}  // namespace

int main(int argc, char** argv) {
  weft::train::route_stop_signals_to_their_own_thread();
  weft::set_program_name(argv[0]);
  CLI::App app{"weft: train, inspect and evaluate models, plan their memory, and see what the hardware does", "weft"};
  app.formatter(std::make_shared<CanonicalNames>());  // before the commands: each takes its parent's
  app.require_subcommand(1);
  std::function<void()> run;
  weft::cli::add_train_commands(app, run);
  weft::cli::add_dtype_command(app, run);
  weft::cli::add_plan_command(app, run);
  weft::cli::add_quant_commands(app, run);
  weft::cli::add_tokenize_commands(app, run);
  weft::cli::add_generate_command(app, run);
  weft::cli::add_bench_command(app, run);
  weft::cli::add_serve_command(app, run);
  weft::cli::add_estimate_command(app, run);
  weft::cli::add_smi_command(app, run);
  weft::cli::add_board_command(app, run);
  weft::cli::add_gpt2_commands(app, run);
  add_help_and_version(app, run);
  const int status = run_command(app, run, argc, argv);
  if (status != 0) weft::dist::exit_if_stuck_after_error(status, kStuckRankGraceSeconds);
  return status;
}