// weft board's data and server: the runs under a log directory read into JSON point for point,
// corrupt files skipped and named with the reader's reason while the rest still plot, the files
// read afresh on each request, and the inputs it cannot serve refused before serving.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/io/tensorboard.h"
#include "weft/monitor/board.h"

namespace weft {
namespace {

using nlohmann::json;
using testing::contains;
using testing::message_of;
using testing::TempDir;

void write_garbage(const std::string& path) {
  std::ofstream(path, std::ios::binary) << "not a TFRecord at all, just some bytes";
}

// Two runs, one nested a level down, and a third holding only a corrupt file.
void write_runs(const TempDir& dir) {
  {
    io::EventWriter first(dir.file("first"));
    first.add_scalar("loss", 2.5, 1, 100.0);
    first.add_scalar("loss", 1.25, 2, 101.0);
    first.add_scalar("lr", 0.1, 1, 100.0);
  }
  {
    io::EventWriter second(dir.file("nested/second"));
    second.add_scalar("loss", 3.0, 5, 200.0);
  }
  std::filesystem::create_directories(dir.file("bad"));
  write_garbage(dir.file("bad/events.out.tfevents.1.host.1.0"));
}

TEST(Board, FindsRunsAtAnyDepthAndReadsTheirPointsExactly) {
  TempDir dir;
  write_runs(dir);
  EXPECT_EQ(monitor::find_runs(dir.path()), (std::vector<std::string>{"bad", "first", "nested/second"}));
  const json board = monitor::read_board(dir.path());
  ASSERT_EQ(board["runs"].size(), 2u) << board.dump();
  EXPECT_EQ(board["runs"][0]["name"], "first");
  EXPECT_EQ(board["runs"][0]["tags"]["loss"], json::parse("[[1, 100.0, 2.5], [2, 101.0, 1.25]]"));
  EXPECT_EQ(board["runs"][0]["tags"]["lr"][0][2].get<double>(), static_cast<double>(0.1f));
  EXPECT_EQ(board["runs"][1]["name"], "nested/second");
  EXPECT_EQ(board["runs"][1]["tags"], json::parse(R"({"loss": [[5, 200.0, 3.0]]})"));
  ASSERT_EQ(board["skipped"].size(), 1u);
  EXPECT_EQ(board["skipped"][0]["file"], "bad/events.out.tfevents.1.host.1.0");
  EXPECT_TRUE(contains(board["skipped"][0]["reason"], "corrupt")) << board["skipped"][0]["reason"];
}

TEST(Board, ACorruptFileOfARunLeavesItsOtherFilesPlotted) {
  TempDir dir;
  {
    io::EventWriter good(dir.file("run"));
    good.add_scalar("loss", 4.0, 1, 1.0);
  }
  {
    io::EventWriter corrupt(dir.file("run"));
    corrupt.add_scalar("loss", 5.0, 2, 2.0);
    corrupt.flush();
    // A byte of the last record's payload changed: its CRC no longer matches.
    std::fstream file(corrupt.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-6, std::ios::end);
    file.put('\xFF');
  }
  const json board = monitor::read_board(dir.path());
  ASSERT_EQ(board["runs"].size(), 1u);
  EXPECT_EQ(board["runs"][0]["tags"]["loss"], json::parse("[[1, 1.0, 4.0]]"));
  ASSERT_EQ(board["skipped"].size(), 1u);
  EXPECT_TRUE(contains(board["skipped"][0]["reason"], "CRC-32C does not match")) << board["skipped"][0]["reason"];
}

// stdio writes an event file's buffer when it is full, so a run in progress usually ends part-way
// through a record: the records before it plot, and nothing is reported skipped.
TEST(Board, ARunInProgressPlotsTheRecordsItsWriterFinished) {
  TempDir dir;
  io::EventWriter writing(dir.file("run"));
  writing.add_scalar("loss", 4.0, 1, 1.0);
  writing.add_scalar("loss", 5.0, 2, 2.0);
  writing.flush();
  std::filesystem::resize_file(writing.path(), std::filesystem::file_size(writing.path()) - 3);
  const json board = monitor::read_board(dir.path());
  ASSERT_EQ(board["runs"].size(), 1u);
  EXPECT_EQ(board["runs"][0]["tags"]["loss"], json::parse("[[1, 1.0, 4.0]]"));
  EXPECT_TRUE(board["skipped"].empty()) << board["skipped"].dump();
}

// --logdir pointing straight at a run: the run is named after the directory, with or without a
// trailing slash. NaN and the infinities, which JSON cannot hold, arrive as strings the page reads.
TEST(Board, ALogDirThatIsARunIsNamedAfterItAndNonFiniteValuesSurvive) {
  TempDir dir;
  {
    io::EventWriter run(dir.file("gpt-small"));
    run.add_scalar("loss", std::nan(""), 1, 1.0);
    run.add_scalar("loss", HUGE_VAL, 2, 2.0);
    run.add_scalar("loss", -HUGE_VAL, 3, 3.0);
    run.add_scalar("loss", 0.5, 4, 4.0);
  }
  for (const std::string& log_dir : {dir.file("gpt-small"), dir.file("gpt-small/")}) {
    const json board = monitor::read_board(log_dir);
    ASSERT_EQ(board["runs"].size(), 1u) << log_dir;
    EXPECT_EQ(board["runs"][0]["name"], "gpt-small") << log_dir;
    EXPECT_EQ(board["runs"][0]["tags"]["loss"],
              json::parse(R"([[1, 1.0, "NaN"], [2, 2.0, "Infinity"], [3, 3.0, "-Infinity"], [4, 4.0, 0.5]])"));
  }
}

TEST(Board, ServesThePageAndTheRunsReadAfreshOnEachRequest) {
  TempDir dir;
  write_runs(dir);
  monitor::BoardServer server({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0});
  server.bind();
  EXPECT_TRUE(contains(server.ready_line(), "http://127.0.0.1:" + std::to_string(server.port()) + "/"));
  std::thread serving([&server] { server.serve(); });
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_TRUE(contains(page->body, "<title>weft board</title>"));
  // Self-contained: no script, style sheet or image fetched from anywhere (SVG's namespace URI is
  // a name, not a fetch).
  for (const char* fetch : {" src=", "<link", "@import", "url("}) EXPECT_FALSE(contains(page->body, fetch)) << fetch;
  const httplib::Result before = client.Get("/api/runs");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);
  EXPECT_EQ(json::parse(before->body), monitor::read_board(dir.path()));
  {
    io::EventWriter third(dir.file("third"));
    third.add_scalar("accuracy", 0.5, 3, 300.0);
  }
  const json after = json::parse(client.Get("/api/runs")->body);
  ASSERT_EQ(after["runs"].size(), 3u);
  EXPECT_EQ(after["runs"][2]["name"], "third");
  EXPECT_EQ(after["runs"][2]["tags"]["accuracy"], json::parse("[[3, 300.0, 0.5]]"));
  server.stop();
  serving.join();
}

TEST(Board, RefusesALogDirectoryWithoutRunsAndABusyPort) {
  TempDir dir;
  EXPECT_TRUE(contains(message_of<IOError>([&] { monitor::BoardServer({.log_dir = dir.path()}); }), "no runs"));
  EXPECT_TRUE(contains(message_of<IOError>([&] { monitor::BoardServer({.log_dir = dir.file("missing")}); }),
                       "not a directory"));
  write_runs(dir);
  monitor::BoardServer first({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0});
  first.bind();
  monitor::BoardServer second({.log_dir = dir.path(), .host = "127.0.0.1", .port = first.port()});
  EXPECT_TRUE(contains(message_of<IOError>([&] { second.bind(); }),
                       "cannot listen on 127.0.0.1:" + std::to_string(first.port())));
}

}  // namespace
}  // namespace weft
