// `weft board` as a user runs it: a log directory without runs, a missing one, and a port in use
// are each refused in one line with exit status 2 before anything is served.
#include <gtest/gtest.h>

#include "cli/weft_cli.h"
#include "temp_dir.h"
#include "weft/io/tensorboard.h"
#include "weft/monitor/board.h"

namespace weft {
namespace {

using testing::expect_usage_error;
using testing::TempDir;
using testing::weft_cli;

TEST(BoardCli, RefusesALogDirectoryWithoutRuns) {
  TempDir dir;
  expect_usage_error(weft_cli("board --logdir " + dir.path() + " --port 0"), "no runs");
  expect_usage_error(weft_cli("board --logdir " + dir.file("missing") + " --port 0"), "not a directory");
}

TEST(BoardCli, RefusesAPortInUse) {
  TempDir dir;
  io::EventWriter(dir.file("run")).add_scalar("loss", 1.0, 1);
  monitor::BoardServer holder({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}});
  holder.bind();
  expect_usage_error(weft_cli("board --logdir " + dir.path() + " --port " + std::to_string(holder.port())),
                     "cannot listen on 127.0.0.1:" + std::to_string(holder.port()));
}

}  // namespace
}  // namespace weft
