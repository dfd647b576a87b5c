// One command-line vocabulary (docs/cli.md): the canonical flag names, the older spellings they
// still take, "did you mean" for commands, flags and device names, weft help and weft --version.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "expect_error.h"
#include "weft_cli.h"

namespace weft {
namespace {

using testing::contains;
using testing::expect_usage_error;
using testing::last_line_json;
using testing::Outcome;
using testing::weft_cli;

void expect_line(const std::string& args, const std::string& line) {
  const Outcome o = weft_cli(args);
  EXPECT_EQ(o.status, 2) << args;
  EXPECT_EQ(o.output, "weft: " + line + "\n") << args;
}

TEST(Vocabulary, UnknownCommandSuggestsTheClosest) {
  expect_line("trian", "unknown command 'trian'; did you mean 'train'? (see weft --help)");
  expect_line("ckpt consolidat x", "unknown command 'ckpt consolidat'; did you mean 'ckpt consolidate'? (see weft ckpt --help)");
  expect_line("upload", "unknown command 'upload' (see weft --help)");
  expect_line("export", "a command is needed after 'weft export': gpt2 (see weft export --help)");
  expect_line("bench", "a command is needed after 'weft bench': comm, hierarchy (see weft bench --help)");
}

// The flag is named, not the value after it, and the help pointed at is the command's own.
TEST(Vocabulary, UnknownFlagSuggestsTheCanonicalNameAndItsCommandsHelp) {
  expect_line("train --learning-rate 0.1", "unknown flag --learning-rate; did you mean --lr? (see weft train --help)");
  expect_line("train --learning-rate=0.1", "unknown flag --learning-rate; did you mean --lr? (see weft train --help)");
  expect_line("eval --chekpoint run", "unknown flag --chekpoint; did you mean --checkpoint? (see weft eval --help)");
  expect_line("plan --model gpt --world-size 8", "unknown flag --world-size; did you mean --gpus? (see weft plan --help)");
  expect_line("plan --model gpt --wrold 8", "unknown flag --wrold; did you mean --gpus? (see weft plan --help)");
  expect_line("ckpt consolidate run --outt x",
              "unknown flag --outt; did you mean --out? (see weft ckpt consolidate --help)");
  expect_line("info a b", "unexpected argument 'b' (see weft info --help)");
}

TEST(Vocabulary, DeviceNamesIgnoreCaseSpacesAndDashesAndSuggestTheTables) {
  expect_usage_error(weft_cli("plan --params 7B --device A100"),
                     "--device: must be one of A100-40GB|A100-80GB|H100|H200|RTX4090|cpu, got 'A100'; did you mean "
                     "A100-40GB or A100-80GB?");
  expect_usage_error(weft_cli("estimate time --params 7B --tokens 1e12 --device 4090"), "did you mean RTX4090?");
  for (const char* name : {"'RTX 4090'", "rtx-4090", "rtx4090"}) {
    const Outcome o = weft_cli(std::string("plan --params 7B --json --device ") + name);
    ASSERT_EQ(o.status, 0) << o.output;
    EXPECT_EQ(last_line_json(o.output)["device"], "RTX4090");
  }
  expect_usage_error(weft_cli("train --model gtp"), "--model: must be one of mlp, cnn, gpt, got 'gtp'; did you mean gpt?");
}

TEST(Vocabulary, HelpPrintsTheHelpOfWeftOrOfACommand) {
  const Outcome all = weft_cli("help");
  EXPECT_EQ(all.status, 0);
  EXPECT_TRUE(contains(all.output, "Usage: weft [OPTIONS] SUBCOMMAND")) << all.output;
  const Outcome train = weft_cli("help train");
  EXPECT_EQ(train.status, 0);
  EXPECT_EQ(train.output, weft_cli("train --help").output);
  const Outcome nested = weft_cli("help ckpt consolidate");
  EXPECT_EQ(nested.status, 0);
  EXPECT_TRUE(contains(nested.output, "Usage: weft ckpt consolidate [OPTIONS] checkpoint")) << nested.output;
  expect_line("help trian", "unknown command 'trian'; did you mean 'train'? (see weft --help)");
}

TEST(Vocabulary, VersionPrintsOneLine) {
  const Outcome flag = weft_cli("--version");
  EXPECT_EQ(flag.status, 0);
  // "weft 0.1.0\n", or "weft 0.1.0 (git 2d1c15b)\n" in a git checkout. (No <regex>: GCC 12 warns
  // inside it under the sanitizers.)
  const std::string version = flag.output.substr(0, flag.output.find(' ', 5));
  EXPECT_TRUE(flag.output.starts_with("weft ") && std::count(version.begin(), version.end(), '.') == 2 &&
              version.find_first_not_of("0123456789.\n", 5) == std::string::npos && flag.output.ends_with("\n") &&
              std::count(flag.output.begin(), flag.output.end(), '\n') == 1)
      << flag.output;
  const size_t git = flag.output.find(" (git ");
  if (git != std::string::npos) {
    EXPECT_EQ(flag.output.find_first_not_of("0123456789abcdef", git + 6), flag.output.size() - 2) << flag.output;
  }
  EXPECT_EQ(weft_cli("version").output, flag.output);
}

// --help shows the canonical name and lists the older spellings beside it.
TEST(Vocabulary, HelpShowsCanonicalNamesWithTheirAliases) {
  const std::string help = weft_cli("plan --help").output;
  EXPECT_TRUE(contains(help, "  --gpus INT")) << help;
  EXPECT_TRUE(contains(help, "(also --world, --count)")) << help;
  EXPECT_FALSE(contains(help, "--gpus,")) << help;
  EXPECT_FALSE(contains(help, "  --world")) << help;
  EXPECT_TRUE(contains(weft_cli("estimate comm --help").output, "  --batch-tokens NUMBER"));
}

// Each old spelling gives what the canonical name gives.
TEST(Vocabulary, OldSpellingsStillWork) {
  auto json = [](const std::string& args) {
    const Outcome o = weft_cli(args + " --json");
    EXPECT_EQ(o.status, 0) << args << "\n" << o.output;
    return o.status == 0 ? last_line_json(o.output) : nlohmann::json{};
  };
  const std::string gpt = "plan --layers 2 --heads 2 --vocab 64 --tp 1 ";
  EXPECT_EQ(json(gpt + "--dim 64 --context 32 --batch-size 8 --gpus 2"),
            json(gpt + "--hidden 64 --seq 32 --batch 8 --world 2"));
  EXPECT_EQ(json("plan --model cnn --batch-size 8 --gpus 2"), json("plan --model cnn --batch 8 --count 2"));
  const std::string time = "estimate time --tokens 1e12 ";
  const nlohmann::json gpus = json(time + "--params 7B --gpus 8");
  EXPECT_EQ(gpus["count"], 8);
  EXPECT_EQ(gpus, json(time + "--params 7e9 --count 8"));
  EXPECT_EQ(gpus, json(time + "--params 7000M --world 8"));
  const std::string comm = "estimate comm --params 1.5B --link pcie4 ";
  EXPECT_EQ(json(comm + "--gpus 8 --batch-tokens 8192"), json(comm + "--world 8 --batch 8192"));
  // A checkpoint is --checkpoint wherever one is read; the positional still works where it did.
  for (const std::string command : {"info", "quantize --int8 --out /nonexistent/q", "ckpt consolidate --out /nonexistent/q"}) {
    const Outcome flag = weft_cli(command + " --checkpoint /nonexistent/run");
    EXPECT_EQ(flag.status, 2) << command;
    EXPECT_TRUE(contains(flag.output, "/nonexistent/run")) << flag.output;
    EXPECT_EQ(flag.output, weft_cli(command + " /nonexistent/run").output) << command;
  }
}

}  // namespace
}  // namespace weft
