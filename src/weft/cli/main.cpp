// `weft`: one command line for everything weft does. Each subcommand lives in its own file and
// only parses flags, calls the layers below, and prints. Errors a user can cause (bad flags, bad
// files, bad values) print one line on stderr and exit with status 2; anything else is a bug
// and exits with 1. A bad value reads "weft: --flag: must be ..., got '...'" (core/flag_value.h).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "weft/cli/commands.h"
#include "weft/core/error.h"
#include "weft/core/program.h"
#include "weft/train/stop_signals.h"

// The whole line in one write: the ranks of an MPI launch share one stderr, and a line written in
// pieces interleaves with another rank's.
namespace {
std::string error_line(const std::string& message) { return "weft: " + message + "\n"; }
}  // namespace

int main(int argc, char** argv) {
  weft::train::route_stop_signals_to_their_own_thread();
  weft::set_program_name(argv[0]);
  CLI::App app{"weft: train, inspect and evaluate models, plan their memory, and see what the hardware does"};
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
  // A value refused where it is parsed (cli/flags.h) reads as every other refusal; CLI11's own
  // errors (an unknown or missing flag) point at the help.
  try {
    app.parse(argc, argv);
    run();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ValidationError& e) {
    std::cerr << error_line(e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << error_line(std::string(e.what()) + " (see weft --help)");
    return 2;
  } catch (const weft::Error& e) {
    std::cerr << error_line(e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // The last net for a path call that readers do not wrap: it is always about a path from the
    // user's environment (a symlink loop, a name too long, no permission), and names it.
    std::cerr << error_line(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::cerr << error_line(std::string("internal error: ") + e.what());
    return 1;
  }
  return 0;
}
