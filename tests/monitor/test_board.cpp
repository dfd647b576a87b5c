// weft board's data and server: the runs under a log directory read into JSON point for point,
// corrupt files stopped at the bad record and named with the reader's reason while the rest still
// plot, what the files gained read on each request, whatever the directory holds (link loops,
// names that are not UTF-8, sparse files of gigabytes), and the inputs it cannot serve refused
// before serving.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
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

json board_of(const std::string& log_dir) { return json::parse(monitor::RunIndex(log_dir).runs_json()); }

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
  monitor::RunIndex index(dir.path());
  const json board = json::parse(index.runs_json());
  // "bad" holds event files but no scalars: found, not shown.
  EXPECT_TRUE(index.found_event_files());
  EXPECT_EQ(index.shown_runs(), (std::vector<std::string>{"first", "nested/second"}));
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
  const json board = board_of(dir.path());
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
  const json board = board_of(dir.path());
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
    const json board = board_of(log_dir);
    ASSERT_EQ(board["runs"].size(), 1u) << log_dir;
    EXPECT_EQ(board["runs"][0]["name"], "gpt-small") << log_dir;
    EXPECT_EQ(board["runs"][0]["tags"]["loss"],
              json::parse(R"([[1, 1.0, "NaN"], [2, 2.0, "Infinity"], [3, 3.0, "-Infinity"], [4, 4.0, 0.5]])"));
  }
}

TEST(Board, ServesThePageAndTheRunsReadAfreshOnEachRequest) {
  TempDir dir;
  write_runs(dir);
  monitor::BoardServer server({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}});
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
  EXPECT_EQ(json::parse(before->body), board_of(dir.path()));
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

// A web page of another origin is refused, naming the flag that allows it; allowed, it is answered
// with the CORS header its browser needs.
TEST(Board, AnotherOriginIsRefusedUnlessAllowed) {
  TempDir dir;
  write_runs(dir);
  monitor::BoardServer server(
      {.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {"http://dashboard.test"}});
  server.bind();
  std::thread serving([&server] { server.serve(); });
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result foreign = client.Get("/api/runs", {{"Origin", "http://evil.test"}});
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->status, 403);
  EXPECT_TRUE(contains(foreign->body, "allow its origin with --allow-origin")) << foreign->body;
  const httplib::Result allowed = client.Get("/api/runs", {{"Origin", "http://dashboard.test"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200);
  EXPECT_EQ(allowed->get_header_value("Access-Control-Allow-Origin"), "http://dashboard.test");
  server.stop();
  serving.join();
}

// Counted as the page counts them: a run whose only file is corrupt plots nothing, so it is not one.
TEST(Board, TheReadyLineCountsTheRunsThePageShows) {
  TempDir dir;
  write_runs(dir);
  monitor::BoardServer server({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}});
  server.bind();
  EXPECT_TRUE(contains(server.ready_line(), "weft board: 2 runs under " + dir.path())) << server.ready_line();
  EXPECT_EQ(board_of(dir.path())["runs"].size(), 2u);
}

TEST(Board, RunsAreInNaturalOrder) {
  TempDir dir;
  for (const char* name : {"run10", "run2", "run1", "b/run02x", "a"}) {
    io::EventWriter run(dir.file(name));
    run.add_scalar("loss", 1.0, 1, 1.0);
  }
  monitor::RunIndex index(dir.path());
  index.refresh();
  EXPECT_EQ(index.shown_runs(), (std::vector<std::string>{"a", "b/run02x", "run1", "run2", "run10"}));
  EXPECT_TRUE(monitor::natural_less("x9y", "x10a"));
  EXPECT_FALSE(monitor::natural_less("x10a", "x9y"));
  EXPECT_TRUE(monitor::natural_less("run", "run1"));
  EXPECT_TRUE(monitor::natural_less("lr0.05", "lr0.1"));
  EXPECT_TRUE(monitor::natural_less("lr0.1", "lr1e-3"));
  EXPECT_TRUE(monitor::natural_less("a1.2.9", "a1.2.10"));
  EXPECT_FALSE(monitor::natural_less("lr0.1", "lr0.05"));
}

// A link to itself (ELOOP), links back up to the log directory and to a run, a directory nested
// too deep and an event "file" that is a FIFO: each is passed over, the runs still show, once
// each, and nothing in the answer names a path the user did not give.
TEST(Board, LinkLoopsAndOddEntriesAreSkippedNotFatal) {
  TempDir dir;
  write_runs(dir);
  namespace fs = std::filesystem;
  fs::create_directory_symlink("self", dir.file("self"));
  fs::create_directory_symlink("..", dir.file("first/up"));
  fs::create_directory_symlink(".", dir.file("nested/here"));
  fs::create_directory_symlink(dir.file("first"), dir.file("first-again"));
  std::string deep = dir.file("deep");
  for (int level = 0; level < monitor::RunIndex::kMaxDepth + 2; ++level) deep += "/d";
  io::EventWriter(deep).add_scalar("loss", 1.0, 1, 1.0);
  ASSERT_EQ(::mkfifo(dir.file("first/events.out.tfevents.fifo").c_str(), 0600), 0);

  monitor::BoardServer server({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}});
  server.bind();
  std::thread serving([&server] { server.serve(); });
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result runs = client.Get("/api/runs");
  server.stop();
  serving.join();
  ASSERT_TRUE(runs);
  EXPECT_EQ(runs->status, 200);
  json board = json::parse(runs->body);
  std::vector<std::string> names;
  for (const json& run : board["runs"]) names.push_back(run["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"first", "nested/second"}));
  std::map<std::string, std::string> skipped;
  for (const json& s : board["skipped"]) skipped[s["file"]] = s["reason"];
  EXPECT_TRUE(contains(skipped["self"], "symbolic links")) << board["skipped"].dump();
  EXPECT_EQ(skipped["first/events.out.tfevents.fifo"], "not a regular file");
  EXPECT_TRUE(contains(skipped["bad/events.out.tfevents.1.host.1.0"], "corrupt"));
  EXPECT_EQ(skipped.size(), 4u) << board["skipped"].dump();  // and the directory below the depth bound
  board.erase("logdir");  // what the user gave, the one place the log directory's path may appear
  EXPECT_FALSE(contains(board.dump(), dir.path())) << board.dump();
  for (const auto& [header, value] : runs->headers) EXPECT_FALSE(contains(value, dir.path())) << header;
}

// Run and tag names are bytes: the JSON replaces what is not UTF-8 and stays valid, and the other
// runs still show.
TEST(Board, NamesThatAreNotUtf8AreReplacedAndTheJsonStaysValid) {
  TempDir dir;
  {
    io::EventWriter odd(dir.file("run-\xff"));
    odd.add_scalar("loss\xfe", 1.5, 1, 1.0);
  }
  {
    io::EventWriter plain(dir.file("plain"));
    plain.add_scalar("loss", 2.5, 1, 1.0);
  }
  const json board = board_of(dir.path());  // json::parse refuses invalid UTF-8
  ASSERT_EQ(board["runs"].size(), 2u) << board.dump();
  EXPECT_EQ(board["runs"][0]["name"], "plain");
  EXPECT_EQ(board["runs"][1]["name"], "run-\xEF\xBF\xBD");
  EXPECT_EQ(board["runs"][1]["tags"]["loss\xEF\xBF\xBD"], json::parse("[[1, 1.0, 1.5]]"));
}

// A 2 GiB file of zeros (sparse: truncate -s 2G) and one whose records are followed by 2 GiB of
// zeros: the first record's header fails its CRC, so neither is read beyond a chunk; the records
// before the zeros plot, and the note says where reading stopped.
TEST(Board, SparseGigabyteFilesCostNeitherTimeNorMemory) {
  TempDir dir;
  std::string valid_then_zeros;
  {
    io::EventWriter run(dir.file("run"));
    run.add_scalar("loss", 0.5, 1, 1.0);
    run.flush();
    valid_then_zeros = run.path();
  }
  const uint64_t records = std::filesystem::file_size(valid_then_zeros);
  std::filesystem::resize_file(valid_then_zeros, 2ull << 30);
  std::filesystem::create_directories(dir.file("zeros"));
  { std::ofstream(dir.file("zeros/events.out.tfevents.1.host.1.0")); }
  std::filesystem::resize_file(dir.file("zeros/events.out.tfevents.1.host.1.0"), 2ull << 30);

  monitor::RunIndex index(dir.path());
  const auto start = std::chrono::steady_clock::now();
  const json board = json::parse(index.runs_json());
  const json again = json::parse(index.runs_json());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(again, board);
  ASSERT_EQ(board["runs"].size(), 1u) << board.dump();
  EXPECT_EQ(board["runs"][0]["tags"]["loss"], json::parse("[[1, 1.0, 0.5]]"));
  ASSERT_EQ(board["skipped"].size(), 2u) << board["skipped"].dump();
  EXPECT_TRUE(contains(board["skipped"][0]["reason"], "record at byte offset " + std::to_string(records)));
  EXPECT_TRUE(contains(board["skipped"][0]["reason"], "the records before it are plotted"));
  EXPECT_TRUE(contains(board["skipped"][1]["reason"], "record at byte offset 0 has a length whose CRC-32C"));
  EXPECT_FALSE(contains(board["skipped"][1]["reason"], "records before it")) << "there are none";
}

// What a run appends is read from where the last refresh stopped: a record already read that
// changes afterwards is not read again (here corrupted in place, unnoticed), while the new
// records are.
TEST(Board, AppendedEventsArePickedUpIncrementally) {
  TempDir dir;
  io::EventWriter run(dir.file("run"));
  run.add_scalar("loss", 4.0, 1, 1.0);
  run.flush();
  monitor::RunIndex index(dir.path());
  EXPECT_EQ(json::parse(index.runs_json())["runs"][0]["tags"]["loss"], json::parse("[[1, 1.0, 4.0]]"));
  {
    std::fstream file(run.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-6, std::ios::end);
    file.put('\xFF');
  }
  run.add_scalar("loss", 3.0, 2, 2.0);
  run.flush();
  const json board = json::parse(index.runs_json());
  ASSERT_EQ(board["runs"].size(), 1u) << board.dump();
  EXPECT_EQ(board["runs"][0]["tags"]["loss"], json::parse("[[1, 1.0, 4.0], [2, 2.0, 3.0]]"));
  EXPECT_TRUE(board["skipped"].empty()) << board["skipped"].dump();
  EXPECT_TRUE(contains(board_of(dir.path())["skipped"].dump(), "CRC-32C does not match"));
}

// At most bytes_per_refresh of records a refresh: a long file is caught up over several, in order.
TEST(Board, EachRefreshReadsABoundedNumberOfBytes) {
  TempDir dir;
  {
    io::EventWriter run(dir.file("run"));
    for (int step = 1; step <= 50; ++step) run.add_scalar("loss", step, step, step);
  }
  monitor::RunIndex index(dir.path(), {.bytes_per_refresh = 400, .points_per_tag = 1000, .tags_per_run = 1000});
  std::vector<size_t> counts;
  json points;
  do {
    points = json::parse(index.runs_json())["runs"][0]["tags"]["loss"];
    counts.push_back(points.size());
  } while (points.size() < 50 && counts.size() < 100);
  EXPECT_GE(counts.size(), 4u);
  EXPECT_LT(counts[0], 50u);
  ASSERT_EQ(points.size(), 50u);
  for (int step = 1; step <= 50; ++step) EXPECT_EQ(points[step - 1][0], step);
}

// A long run keeps points_per_tag points of each tag: in step order, the last one always among them.
TEST(Board, ATagKeepsABoundedSampleEndingAtTheLatestStep) {
  TempDir dir;
  io::EventWriter run(dir.file("run"));
  monitor::RunIndex index(dir.path(), {.bytes_per_refresh = 64 << 20, .points_per_tag = 10, .tags_per_run = 1000});
  for (int step = 1; step <= 1000; ++step) {
    run.add_scalar("loss", step, step, step);
    if (step % 100 == 0) {
      run.flush();
      const json points = json::parse(index.runs_json())["runs"][0]["tags"]["loss"];
      ASSERT_EQ(points.size(), 10u);
      EXPECT_EQ(points[9][0], step);
      for (size_t i = 1; i < points.size(); ++i) EXPECT_LT(points[i - 1][0], points[i][0]);
    }
  }
}

// Tags past tags_per_run are not kept (each would be a chart), and the run says so.
TEST(Board, ARunKeepsABoundedNumberOfTags) {
  TempDir dir;
  {
    io::EventWriter run(dir.file("run"));
    for (const char* tag : {"a", "b", "c", "d"}) run.add_scalar(tag, 1.0, 1, 1.0);
    run.add_scalar("a", 2.0, 2, 2.0);
  }
  const json board = json::parse(
      monitor::RunIndex(dir.path(), {.bytes_per_refresh = 64 << 20, .points_per_tag = 1000, .tags_per_run = 2}).runs_json());
  ASSERT_EQ(board["runs"].size(), 1u);
  EXPECT_EQ(board["runs"][0]["tags"], json::parse(R"({"a": [[1, 1.0, 1.0], [2, 2.0, 2.0]], "b": [[1, 1.0, 1.0]]})"));
  ASSERT_EQ(board["skipped"].size(), 1u);
  EXPECT_EQ(board["skipped"][0]["file"], "run");
  EXPECT_TRUE(contains(board["skipped"][0]["reason"], "more than 2 tags")) << board["skipped"].dump();
}

// A resumed run's session start, read in a later refresh than the points it drops, still drops them.
TEST(Board, ASessionStartDropsPointsReadInEarlierRefreshes) {
  TempDir dir;
  monitor::RunIndex index(dir.path());
  {
    io::EventWriter killed(dir.file("run"));
    for (int64_t step = 1; step <= 6; ++step) killed.add_scalar("loss", 1.0 * step, step, 1.0);
  }
  EXPECT_EQ(json::parse(index.runs_json())["runs"][0]["tags"]["loss"].size(), 6u);
  io::EventWriter resumed(dir.file("run"));
  resumed.start_session(4);
  for (int64_t step = 4; step <= 7; ++step) resumed.add_scalar("loss", 10.0 * step, step, 2.0);
  resumed.flush();
  const json board = json::parse(index.runs_json());
  ASSERT_EQ(board["runs"].size(), 1u) << board.dump();
  std::vector<std::pair<int64_t, float>> loss;
  for (const json& p : board["runs"][0]["tags"]["loss"]) loss.emplace_back(p[0], p[2]);
  const std::vector<std::pair<int64_t, float>> expected = {{1, 1}, {2, 2}, {3, 3}, {4, 40}, {5, 50}, {6, 60}, {7, 70}};
  EXPECT_EQ(loss, expected);
}

TEST(Board, RefusesALogDirectoryWithoutRunsAndABusyPort) {
  TempDir dir;
  EXPECT_TRUE(contains(message_of<IOError>([&] { monitor::BoardServer({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}}); }), "no runs"));
  EXPECT_TRUE(contains(message_of<IOError>([&] { monitor::BoardServer({.log_dir = dir.file("missing"), .host = "127.0.0.1", .port = 0, .allowed_origins = {}}); }),
                       "not a directory"));
  write_runs(dir);
  monitor::BoardServer first({.log_dir = dir.path(), .host = "127.0.0.1", .port = 0, .allowed_origins = {}});
  first.bind();
  monitor::BoardServer second({.log_dir = dir.path(), .host = "127.0.0.1", .port = first.port(), .allowed_origins = {}});
  EXPECT_TRUE(contains(message_of<IOError>([&] { second.bind(); }),
                       "cannot listen on 127.0.0.1:" + std::to_string(first.port())));
}

}  // namespace
}  // namespace weft
