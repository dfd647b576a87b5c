// weft train --data on a user's own data, as a user runs it: a folder of images or a CSV table,
// trained, evaluated and loaded from the checkpoint alone; and each bad input's one-line refusal.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/image_fixtures.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "weft/infer/load.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rows of three classes in two features, apart by several standard deviations.
void write_three_class_table(const std::string& path, int rows) {
  std::ofstream out(path);
  out << "length,weight,species\n";
  uint32_t state = 7;
  const auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>(state >> 8) / (1 << 24) - 0.5;  // [-0.5, 0.5)
  };
  const char* names[] = {"ant", "bee", "moth"};
  for (int i = 0; i < rows; ++i) {
    const int c = i % 3;
    out << 100 + 30 * c + 10 * noise() << "," << 5 - 2 * c + noise() << "," << names[c] << "\n";
  }
}

TEST(OwnDataCli, MlpLearnsAnImageFolderAndItsCheckpointStandsAlone) {
  TempDir dir;
  write_three_class_folder(dir.file("shapes"), 30);
  const auto start = std::chrono::steady_clock::now();
  const Outcome trained = weft_cli("train --model mlp --data " + dir.file("shapes") + " --steps 20 --eval-every 0 --threads 2 --out " +
                                   dir.file("run") + " --json");
  ASSERT_EQ(trained.status, 0) << trained.output;
  const double train_s = seconds_since(start);
  EXPECT_TRUE(contains(trained.output, "data: " + dir.file("shapes") + ": 3 classes (dark, left, top), 81 training "
                                       "images 1x12x12, 9 held out (10% of each class, drawn by --seed)")) << trained.output;
  EXPECT_TRUE(contains(trained.output, "eval --checkpoint " + dir.file("run") + " --data " + dir.file("shapes")));
  const double accuracy = last_line_json(trained.output)["test_accuracy"].get<double>();
  EXPECT_GE(accuracy, 0.99) << trained.output;
  std::printf("image folder: mlp, 20 steps: held-out accuracy %.2f%%, %.2f s\n", 100 * accuracy, train_s);

  const Outcome evaluated = weft_cli("eval --checkpoint " + dir.file("run") + " --data " + dir.file("shapes") + " --json");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  EXPECT_EQ(last_line_json(evaluated.output)["samples"], 90);
  EXPECT_GE(last_line_json(evaluated.output)["accuracy"].get<double>(), 0.99);

  expect_usage_error(weft_cli("quantize " + dir.file("run") + " --int8 --out " + dir.file("q.safetensors")),
                     " was trained on its own data (image-folder, weft train --data); weft quantize quantizes the "
                     "classifiers of fashion-mnist and mnist");

  // Without the data: the checkpoint says what the model takes and predicts.
  fs::remove_all(dir.file("shapes"));
  const infer::LoadedModel loaded = infer::load_model(dir.file("run"));
  EXPECT_EQ(loaded.dataset, "image-folder");
  EXPECT_EQ(loaded.labels, (std::vector<std::string>{"dark", "left", "top"}));
  EXPECT_EQ(loaded.input_shape, (Shape{1, 12, 12}));
  std::vector<uint8_t> left(144, 20);
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 6; ++x) left[static_cast<size_t>(y * 12 + x)] = 210;
  const Tensor logits = (*loaded.model)(infer::classifier_input(loaded, Tensor::from_vector(left, {12, 12})));
  EXPECT_EQ(logits.shape(), (Shape{1, 3}));
  const std::vector<float> l = logits.to_vector<float>();
  EXPECT_GT(l[1], std::max(l[0], l[2]));
}

TEST(OwnDataCli, ServeRebuildsAnImageFolderModelFromItsCheckpoint) {
  TempDir dir;
  write_three_class_folder(dir.file("shapes"), 30);
  ASSERT_EQ(weft_cli("train --model mlp --data " + dir.file("shapes") + " --steps 20 --eval-every 0 --threads 2 --out " + dir.file("run")).status, 0);
  fs::remove_all(dir.file("shapes"));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    const std::string command = std::string("exec ") + WEFT_CLI_PATH + " serve --checkpoint " + dir.file("run") +
                                " --port 0 --threads 1";
    execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  FILE* out = fdopen(fds[0], "r");
  char line[1024];
  int port = 0;
  if (fgets(line, sizeof line, out) != nullptr) {
    const std::string text = line;
    const size_t colon = text.find(':', text.find("127.0.0.1"));
    if (colon != std::string::npos) port = std::stoi(text.substr(colon + 1));
  }
  ASSERT_GT(port, 0) << line;
  std::string pixels;
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 12; ++x) pixels += str(y + x ? "," : "", y < 6 ? 210 : 20);  // bright on the top
  int answer = 0;
  std::string body;
  {  // closed before SIGTERM, so that the server has no idle connection to wait for
    httplib::Client client("127.0.0.1", port);
    const httplib::Result r = client.Post("/v1/predict", "{\"inputs\": [[" + pixels + "]]}", "application/json");
    answer = r ? r->status : -1;
    body = r ? r->body : "";
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  fclose(out);
  ASSERT_EQ(answer, 200) << body;
  EXPECT_EQ(nlohmann::json::parse(body)["predictions"][0]["top_k"][0]["name"], "top") << body;
}

TEST(OwnDataCli, CnnTakesTrainAndTestFoldersAtTheSizeAndChannelsAsked) {
  TempDir dir;
  write_three_class_folder(dir.file("data/train"), 10);
  write_three_class_folder(dir.file("data/test"), 2);
  const Outcome trained = weft_cli("train --model cnn --data " + dir.file("data") + " --image-size 16x14 --channels 3 "
                                   "--normalize 0.5,0.5,0.5,0.25,0.25,0.25 --steps 3 --threads 2 --out " + dir.file("run"));
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_TRUE(contains(trained.output, "30 training images 3x16x14, 6 held out in " + dir.file("data/test"))) << trained.output;
  EXPECT_TRUE(contains(trained.output, "normalisation: mean [0.5, 0.5, 0.5], std [0.25, 0.25, 0.25] (--normalize)"));
  const infer::LoadedModel loaded = infer::load_model(dir.file("run"));
  EXPECT_EQ(loaded.input_shape, (Shape{3, 16, 14}));
  EXPECT_EQ(loaded.normalization.std, (std::vector<float>{0.25f, 0.25f, 0.25f}));
  const Outcome evaluated = weft_cli("eval --checkpoint " + dir.file("run") + " --data " + dir.file("data") + " --json");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  EXPECT_EQ(last_line_json(evaluated.output)["samples"], 6);  // test/ only
}

TEST(OwnDataCli, MlpLearnsACsvTable) {
  TempDir dir;
  write_three_class_table(dir.file("animals.csv"), 300);
  const auto start = std::chrono::steady_clock::now();
  const Outcome trained = weft_cli("train --model mlp --data " + dir.file("animals.csv") + " --steps 20 --eval-every 0 --threads 2 --out " +
                                   dir.file("run") + " --json");
  ASSERT_EQ(trained.status, 0) << trained.output;
  const double train_s = seconds_since(start);
  EXPECT_TRUE(contains(trained.output, "3 classes of 'species' (ant, bee, moth), 2 features (length, weight), 270 "
                                       "training rows, 30 held out (10% of each class, drawn by --seed)")) << trained.output;
  const double accuracy = last_line_json(trained.output)["test_accuracy"].get<double>();
  EXPECT_GE(accuracy, 0.95) << trained.output;
  std::printf("table: mlp, 20 steps: held-out accuracy %.2f%%, %.2f s\n", 100 * accuracy, train_s);

  const Outcome evaluated = weft_cli("eval --checkpoint " + dir.file("run") + " --data " + dir.file("animals.csv") + " --json");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  EXPECT_EQ(last_line_json(evaluated.output)["samples"], 300);
  EXPECT_GE(last_line_json(evaluated.output)["accuracy"].get<double>(), 0.95);
  expect_usage_error(weft_cli("eval --checkpoint " + dir.file("run")),
                     dir.file("run") + " was trained on a CSV table; pass the table to evaluate on with --data FILE.csv");

  const infer::LoadedModel loaded = infer::load_model(dir.file("run"));
  EXPECT_EQ(loaded.input_shape, Shape{2});
  ASSERT_TRUE(loaded.table.has_value());
  EXPECT_EQ(loaded.table->features, (std::vector<std::string>{"length", "weight"}));
  const std::vector<float> bee = (*loaded.model)(infer::table_input(loaded, Tensor::from_vector<float>({130, 3}, {2})))
                                     .to_vector<float>();
  EXPECT_GT(bee[1], std::max(bee[0], bee[2]));

  expect_usage_error(weft_cli("serve --checkpoint " + dir.file("run")),
                     dir.file("run") + " holds a classifier of CSV rows; weft serve serves image classifiers and GPTs");

  // Resuming reads the same table with the run's own options.
  const Outcome resumed = weft_cli("train --resume " + dir.file("run") + " --steps 25 --threads 2");
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "2 features (length, weight)")) << resumed.output;
}

TEST(OwnDataCli, BadDataIsOneLineNamingTheFileAndNothingIsWritten) {
  TempDir dir;
  const std::string out = " --steps 2 --out " + dir.file("run");
  const auto refused = [&](const std::string& args, const std::string& says) {
    expect_usage_error(weft_cli("train " + args + out), "weft: " + says);
    EXPECT_FALSE(fs::exists(dir.file("run"))) << args;
  };
  write_three_class_folder(dir.file("corrupt"), 2);
  std::ofstream(dir.file("corrupt/top/9.png")) << "\x89PNG\r\n\x1a\n but then nothing";
  refused("--model mlp --data " + dir.file("corrupt"), dir.file("corrupt/top/9.png") + ": not a valid PNG (libpng: ");

  write_three_class_folder(dir.file("sizes"), 2);
  write_png(dir.file("sizes/top/9.png"), make_image(13, 12, 1, [](int64_t, int64_t, int64_t) { return 0; }));
  refused("--model mlp --data " + dir.file("sizes"), dir.file("sizes/top/9.png") + ": 12x13 pixels, but " +
                                                         dir.file("sizes/dark/0.png") + " is 12x12; give --image-size HxW");

  fs::create_directories(dir.file("empty"));
  refused("--model mlp --data " + dir.file("empty"), dir.file("empty") + ": found no class folders");
  write_png(dir.file("single/cat/a.png"), make_image(12, 12, 1, [](int64_t, int64_t, int64_t) { return 0; }));
  refused("--model cnn --data " + dir.file("single"), dir.file("single") + ": found one class folder ('cat')");

  std::ofstream(dir.file("ragged.csv")) << "a,b,label\n1,2,x\n3,y\n";
  refused("--model mlp --data " + dir.file("ragged.csv"), dir.file("ragged.csv") + ":3: 2 fields, but the header has 3 columns");
  std::ofstream(dir.file("words.csv")) << "a,b,label\n1,2,x\n3,four,y\n";
  refused("--model mlp --data " + dir.file("words.csv"),
          dir.file("words.csv") + ":3: column 'b': 'four' is not a finite number (features are numeric)");
  std::ofstream(dir.file("empty.csv")) << "";
  refused("--model mlp --data " + dir.file("empty.csv"), dir.file("empty.csv") + ": empty; expected a header row");
  refused("--model mlp --data " + dir.file("words.csv") + " --label-column kind",
          dir.file("words.csv") + ": no label column 'kind'; its columns are 'a', 'b', 'label'");
  refused("--model cnn --data " + dir.file("words.csv"), "--model cnn: takes images; --data " + dir.file("words.csv") +
                                                             " is a file, read as a CSV table, whose rows the mlp takes");
  refused("--model mlp --data " + dir.file("nowhere"), "cannot open " + dir.file("nowhere"));

  // Flags of the other kind of data, or of the other task.
  refused("--model mlp --data " + dir.file("words.csv") + " --image-size 8x8",
          "--image-size: is a flag of image folders; --data " + dir.file("words.csv") + " is a file, read as a CSV table");
  refused("--model mlp --data " + dir.file("sizes") + " --label-column a",
          "--label-column: is a flag of CSV tables; --data " + dir.file("sizes") + " is a folder of images");
  refused("--model mlp --channels 3", "--channels: is a flag of --data (a folder of images or a CSV table), not of "
                                      "--dataset fashion-mnist");
  refused("--model mlp --val-fraction 0.2", "--val-fraction: is a flag of --data");
  refused("--model gpt --normalize 0.5,0.5", "--normalize: is not a flag of --model gpt");
  refused("--model mlp --data " + dir.file("sizes") + " --dataset mnist", "--dataset: is not a flag of --data");
  refused("--model mlp --data " + dir.file("sizes") + " --normalize 0.5,0.5,0.5", "--normalize: must be the channels' "
                                                                                 "means then their stds");
  refused("--model mlp --data " + dir.file("sizes") + " --image-size 12", "--image-size: must be HxW such as 32x32, got '12'");
  refused("--model cnn --data " + dir.file("sizes") + " --image-size 8x8",
          "--image-size: the cnn takes images of at least 10x10, got '8x8'");
}

}  // namespace
}  // namespace weft::testing
