// Every subcommand over a corpus of bad inputs, the way a careless or hostile user supplies them:
// truncated, byte-flipped, empty and garbage safetensors files and checkpoint directories,
// directories where files go, missing paths, corrupt trainer.json under --resume, bad IDX files in
// --data-dir, garbage tokenizer models and text. Each run must exit 0 (the input was usable) or 2
// with exactly one line on stderr starting "weft: "; never "internal error", a signal or a
// sanitizer report; and a refused run leaves nothing half-written behind: no output file, no
// checkpoint, a resumed directory byte for byte as it was.
//
// The bad inputs are made here from small good ones (a 1-block GPT and a CNN trained for a step
// or two on 16 random 28x28 images), so the whole corpus runs in seconds.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "weft/core/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using Bytes = std::string;


struct Exit {
  int status = -1;  // the exit status; -1 for a signal
  std::string out, err;
};

Bytes slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Runs `weft args` on one thread, killed after a minute (a hang fails as a signal).
Exit weft(const std::string& args, const testing::TempDir& scratch) {
  const std::string out = scratch.file("stdout"), err = scratch.file("stderr");
  int status = std::system(("OMP_NUM_THREADS=1 timeout -s KILL 60 " + std::string(WEFT_CLI_PATH) + " " + args +
                            " </dev/null >" + out + " 2>" + err)
                               .c_str());
  Exit run;
  run.status = WIFEXITED(status) && WEXITSTATUS(status) != 137 ? WEXITSTATUS(status) : -1;
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

// Every regular file and symlink under `dir` with its content or target, but the run lock.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().filename() == ".weft.lock") continue;
    std::string name = fs::relative(entry.path(), dir).string();
    if (entry.is_symlink()) files[name] = "-> " + fs::read_symlink(entry.path()).string();
    else if (entry.is_regular_file()) files[name] = slurp(entry.path());
  }
  return files;
}

// A good file's bad variants: empty, cut at several points, one byte flipped at several points,
// garbage, and extra bytes after the end. `header` is where the file's header ends (its bytes are
// where a flip most often lands somewhere a reader parses).
std::vector<std::pair<std::string, Bytes>> corruptions(const Bytes& good, size_t header) {
  std::vector<std::pair<std::string, Bytes>> bad{{"empty", ""}, {"garbage", "this is not that kind of file\n"},
                                                  {"appended", good + "trailing junk"}};
  const size_t n = good.size();
  for (size_t cut : {size_t{1}, size_t{7}, size_t{9}, header / 2, header, (header + n) / 2, n - 1})
    if (cut > 0 && cut < n) bad.emplace_back(str("cut-at-", cut), good.substr(0, cut));
  for (size_t at : {size_t{0}, size_t{7}, header / 3, header / 2, header - 2, (header + n) / 2, n - 1}) {
    if (at >= n) continue;
    Bytes flipped = good;
    flipped[at] = static_cast<char>(~flipped[at]);
    bad.emplace_back(str("flip-at-", at), flipped);
  }
  std::sort(bad.begin(), bad.end());
  bad.erase(std::unique(bad.begin(), bad.end(), [](auto& a, auto& b) { return a.first == b.first; }), bad.end());
  return bad;
}

size_t safetensors_header_end(const Bytes& file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(file[i])} << (8 * i);
  return 8 + n;
}

Bytes idx_u8(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<char>(d >> shift));
  return out + data;
}

// The good inputs, made once: an MNIST-style directory, a text, a tokenizer, a GPT and a CNN
// checkpoint.
class BadInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    uint32_t state = 12345;
    auto random_bytes = [&](size_t n) {
      Bytes bytes(n, '\0');
      for (char& b : bytes) b = static_cast<char>((state = state * 1664525u + 1013904223u) >> 24);
      return bytes;
    };
    Bytes labels;
    for (int i = 0; i < 16; ++i) labels.push_back(static_cast<char>(i % 10));
    for (std::string split : {"train", "t10k"}) {
      spit(path("mnist/" + split + "-images-idx3-ubyte"), idx_u8({16, 28, 28}, random_bytes(16 * 28 * 28)));
      spit(path("mnist/" + split + "-labels-idx1-ubyte"), idx_u8({16}, labels));
    }
    Bytes text;
    for (int i = 0; i < 40; ++i) text += str("Fortune ", i, ": the early bird gets the worm, the second mouse the cheese.\n%\n");
    spit(path("text"), text);
    struct {
      std::string args, made;
    } setup[] = {{"tokenize train --vocab 300 " + path("text") + " --out " + path("tok.model"), path("tok.model")},
                 {kGptFlags + " --steps 2 --out " + path("gpt"), path("gpt/model.safetensors")},
                 {"train --model cnn --steps 1 --batch-size 4 --data-dir " + path("mnist") + " --out " + path("cnn"),
                  path("cnn/model.safetensors")}};
    for (const auto& [args, made] : setup) {
      Exit run = weft(args, *dir_);
      ASSERT_EQ(run.status, 0) << args << "\n" << run.out << run.err;
      ASSERT_TRUE(fs::exists(made)) << made;
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string path(const std::string& name) { return dir_->file(name); }

  // Runs `weft args` and returns its exit status; `outputs` are paths it may write, which must
  // not exist when it refuses the input.
  static int check(const std::string& label, const std::string& args, const std::vector<std::string>& outputs = {}) {
    for (const std::string& out : outputs) fs::remove_all(out);
    Exit run = weft(args, *dir_);
    SCOPED_TRACE(label + ": weft " + args);
    EXPECT_TRUE(run.status == 0 || run.status == 2) << "exit " << run.status << "\n" << run.err;
    EXPECT_EQ(run.err.find("internal error"), std::string::npos) << run.err;
    if (run.status != 2) return run.status;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_TRUE(run.err.starts_with("weft: ")) << run.err;
    for (const std::string& out : outputs) {
      std::map<std::string, std::string> left = snapshot(out);
      EXPECT_FALSE(fs::exists(out)) << "a refused run left " << out << (left.empty() ? "" : " holding " + left.begin()->first);
    }
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_->path()))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "left " << entry.path();
    return run.status;
  }

  // A copy of a checkpoint directory (its symlinks kept as symlinks).
  static std::string copy_checkpoint(const std::string& from, const std::string& name) {
    fs::remove_all(path(name));
    fs::copy(path(from), path(name), fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    return path(name);
  }

  static inline const std::string kGptFlags =
      "train --model gpt --layers 1 --heads 1 --dim 8 --context 8 --batch-size 2 --eval-windows 2";
  static inline testing::TempDir* dir_ = nullptr;
};

TEST_F(BadInputs, SafetensorsFiles) {
  const Bytes gpt = slurp(path("gpt/model.safetensors")), cnn = slurp(path("cnn/model.safetensors"));
  for (const auto& [name, bytes] : corruptions(gpt, safetensors_header_end(gpt))) {
    const std::string file = path("bad-gpt/" + name + ".safetensors");
    spit(file, bytes);
    check("info gpt " + name, "info " + file);
    check("generate gpt " + name, "generate --checkpoint " + file + " --prompt hi --max-tokens 2");
  }
  for (const auto& [name, bytes] : corruptions(cnn, safetensors_header_end(cnn))) {
    const std::string file = path("bad-cnn/" + name + ".safetensors");
    spit(file, bytes);
    check("eval cnn " + name, "eval --checkpoint " + file + " --data-dir " + path("mnist"));
    check("quantize cnn " + name, "quantize " + file + " --int8 --calib 1 --batch-size 4 --data-dir " + path("mnist") +
                                      " --out " + path("q.safetensors"),
          {path("q.safetensors")});
  }
  // JSON nested deeper than a stack holds: the parser must refuse it, not recurse into it.
  spit(path("bad-gpt/nested-deep.safetensors"), [] {
    std::string json = R"({"__metadata__":)";
    for (int i = 0; i < 200000; ++i) json += R"({"a":)";
    json += "1" + std::string(200001, '}');
    std::string length;
    for (int i = 0; i < 8; ++i) length.push_back(static_cast<char>(json.size() >> (8 * i)));
    return length + json;
  }());
  check("info nested-deep", "info " + path("bad-gpt/nested-deep.safetensors"));
  check("generate nested-deep", "generate --checkpoint " + path("bad-gpt/nested-deep.safetensors") + " --prompt hi");
  // What the fuzzer keeps (tests/fuzz/corpus), through the command that reads a file the way a
  // user does: the hand-made files and the crashes, and every 16th of its finds (named by their
  // SHA-1), which the corpus test replays in full without a process each.
  std::vector<fs::path> corpus;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(WEFT_FUZZ_CORPUS_DIR) / "safetensors"))
    corpus.push_back(entry.path());
  std::sort(corpus.begin(), corpus.end());
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string name = corpus[i].filename().string();
    bool found_by_fuzzer = name.size() == 40 && name.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!found_by_fuzzer || i % 16 == 0) check("info fuzz corpus " + name, "info " + corpus[i].string());
  }
  for (const std::string& file : {path("mnist"), path("does-not-exist.safetensors"), path("text")}) {
    check("info " + file, "info " + file);
    check("eval " + file, "eval --checkpoint " + file + " --data-dir " + path("mnist"));
    check("generate " + file, "generate --checkpoint " + file + " --prompt hi");
    check("quantize " + file, "quantize " + file + " --int4 --out " + path("q.safetensors"), {path("q.safetensors")});
  }
}

TEST_F(BadInputs, CheckpointDirectoriesAndResume) {
  const Bytes trainer = slurp(path("gpt/trainer.json"));
  auto replaced = [&](const std::string& from, const std::string& to) {
    Bytes out = trainer;
    size_t at = out.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << trainer;
    return at == std::string::npos ? out : out.replace(at, from.size(), to);
  };
  std::vector<std::pair<std::string, Bytes>> bad_trainer = corruptions(trainer, trainer.size());
  bad_trainer.insert(bad_trainer.end(), {{"array", "[]"},
                                         {"nested-deep", Bytes(200000, '[') + Bytes(200000, ']')},
                                         {"objects-nested-deep", [] {
                                            std::string json;
                                            for (int i = 0; i < 200000; ++i) json += R"({"a":)";
                                            return json + "1" + std::string(200000, '}');
                                          }()},
                                         {"epoch-string", replaced("\"epoch\": 0", "\"epoch\": \"0\"")},
                                         {"epoch-huge", replaced("\"epoch\": 0", "\"epoch\": 1e300")},
                                         {"step-negative", replaced("\"step\": 2", "\"step\": -2")},
                                         {"plan-huge", replaced("\"planned_steps\": ", "\"planned_steps\": 99999999999999")},
                                         {"rng-numbers", replaced("\"rng\": [", "\"rng\": [1, 2, 3, 4], \"x\": [")}});
  // Only clearly corrupt trainer.json must be refused: a flipped digit may still be a valid state,
  // and the last byte is a newline.
  auto must_refuse = [&](const std::string& name) {
    return !name.starts_with("flip-at-") && name != str("cut-at-", trainer.size() - 1);
  };
  const std::string resume_flags = kGptFlags + " --data " + path("text") + " --steps 3";
  for (const auto& [name, bytes] : bad_trainer) {
    const std::string dir = copy_checkpoint("gpt", "resume");
    spit(fs::path(dir) / "latest" / "trainer.json", bytes);
    std::map<std::string, std::string> before = snapshot(dir);
    const std::string label = "resume trainer.json " + name;
    int status = check(label, resume_flags + " --resume " + dir + " --out " + dir);
    if (must_refuse(name)) {
      EXPECT_EQ(status, 2) << label << ": resumed from a corrupt trainer.json";
    }
    if (status == 2) {
      EXPECT_TRUE(snapshot(dir) == before) << label << ": a refused resume changed " << dir;
    }
    check("generate trainer.json " + name, "generate --checkpoint " + dir + " --prompt hi --max-tokens 2");
  }
  for (const std::string file : {"optimizer.safetensors", "model.safetensors"}) {
    const Bytes good = slurp(path("gpt/" + file));
    for (const auto& [name, bytes] : corruptions(good, safetensors_header_end(good))) {
      const std::string dir = copy_checkpoint("gpt", "resume");
      spit(fs::path(dir) / "latest" / file, bytes);
      std::map<std::string, std::string> before = snapshot(dir);
      const std::string label = "resume " + file + " " + name;
      if (check(label, resume_flags + " --resume " + dir + " --out " + dir) == 2) {
        EXPECT_TRUE(snapshot(dir) == before) << label << ": a refused resume changed " << dir;
      }
      check("info dir " + file + " " + name, "info " + dir);
    }
  }
  // The directory's structure broken: a file replaced by a directory, a dangling pointer, no files.
  std::string dir = copy_checkpoint("gpt", "broken");
  fs::remove(fs::path(dir) / "latest" / "trainer.json");
  fs::create_directory(fs::path(dir) / "latest" / "trainer.json");
  check("resume trainer.json is a directory", resume_flags + " --resume " + dir);
  dir = copy_checkpoint("gpt", "broken");
  fs::remove_all(fs::path(dir) / "step-00000002");
  check("resume dangling latest", resume_flags + " --resume " + dir);
  check("generate dangling latest", "generate --checkpoint " + dir + " --prompt hi");
  check("eval dangling latest", "eval --checkpoint " + dir);
  check("resume empty dir", resume_flags + " --resume " + path("mnist"));
  check("resume missing dir", resume_flags + " --resume " + path("nowhere"));
  check("resume a file", resume_flags + " --resume " + path("text"));
  check("resume cnn into gpt", resume_flags + " --resume " + path("cnn"));
}

TEST_F(BadInputs, IdxFilesInDataDir) {
  const Bytes images = slurp(path("mnist/train-images-idx3-ubyte")), labels = slurp(path("mnist/train-labels-idx1-ubyte"));
  std::vector<std::pair<std::string, std::pair<std::string, Bytes>>> bad;
  for (auto& [name, bytes] : corruptions(images, 16)) bad.push_back({"images " + name, {"images", bytes}});
  for (auto& [name, bytes] : corruptions(labels, 12)) bad.push_back({"labels " + name, {"labels", bytes}});
  Bytes big_labels(16, '\x0a');
  bad.push_back({"labels out of range", {"labels", idx_u8({16}, big_labels)}});
  bad.push_back({"labels fewer", {"labels", idx_u8({3}, Bytes(3, '\1'))}});
  bad.push_back({"images 1x1", {"images", idx_u8({16, 1, 1}, Bytes(16, '\7'))}});
  bad.push_back({"images 2-d", {"images", idx_u8({16, 784}, images.substr(16))}});
  bad.push_back({"images dims overflow", {"images", idx_u8({0xffffffff, 0xffffffff, 0xffffffff}, Bytes(64, '\0'))}});
  bad.push_back({"images gzip garbage", {"images", Bytes("\x1f\x8b\x08\x00garbage garbage garbage", 28)}});
  for (const auto& [name, file] : bad) {
    for (std::string split : {"train", "t10k"}) {
      const std::string data = path("bad-mnist");
      fs::remove_all(data);
      fs::copy(path("mnist"), data);
      spit(data + "/" + split + "-" + file.first + (file.first == "images" ? "-idx3-ubyte" : "-idx1-ubyte"), file.second);
      if (split == "train")
        check("train " + name, "train --model mlp --steps 1 --batch-size 4 --data-dir " + data + " --out " + path("out"),
              {path("out")});
      else
        check("eval " + name, "eval --checkpoint " + path("cnn") + " --data-dir " + data);
    }
  }
  const std::string data = path("bad-mnist");
  fs::remove_all(data);
  fs::copy(path("mnist"), data);
  fs::remove(data + "/train-labels-idx1-ubyte");
  fs::create_directory(data + "/train-labels-idx1-ubyte");
  check("labels a directory", "train --model mlp --steps 1 --data-dir " + data + " --out " + path("out"), {path("out")});
  check("quantize labels a directory", "quantize " + path("cnn") + " --int8 --data-dir " + data + " --out " +
        path("q.safetensors"), {path("q.safetensors")});
  check("data-dir missing", "train --model mlp --steps 1 --data-dir " + path("nowhere") + " --out " + path("out"),
        {path("out")});
  check("data-dir a file", "eval --checkpoint " + path("cnn") + " --data-dir " + path("text"));
}

TEST_F(BadInputs, TokenizersAndText) {
  const Bytes model = slurp(path("tok.model"));
  std::vector<std::pair<std::string, Bytes>> bad_models = corruptions(model, 64);
  for (const auto& [name, bytes] : bad_models) {
    const std::string file = path("bad-tok/" + name + ".model");
    spit(file, bytes);
    check("encode tokenizer " + name, "tokenize encode --tokenizer " + file + " " + path("text") + " --out " + path("shards"),
          {path("shards")});
    check("generate tokenizer " + name, "generate --checkpoint " + path("gpt") + " --tokenizer " + file + " --prompt hi");
  }
  for (const std::string& file : {path("mnist"), path("nowhere.model")}) {
    check("encode tokenizer " + file, "tokenize encode --tokenizer " + file + " " + path("text") + " --out " +
          path("shards"), {path("shards")});
    check("train tokenizer " + file, kGptFlags + " --steps 1 --tokenizer " + file + " --data " + path("text") +
          " --out " + path("out"), {path("out")});
  }

  ASSERT_EQ(weft("tokenize encode " + path("text") + " --out " + path("good-shards"), *dir_).status, 0);
  Bytes invalid_utf8 = "caf\xe9\n%\n", long_line(40000, 'Q');
  std::vector<std::pair<std::string, Bytes>> bad_text = {
      {"empty", ""},
      {"invalid-utf8", invalid_utf8},
      {"only-separators", "%\n%\n%\n"},
      {"binary", slurp(path("gpt/model.safetensors")).substr(0, 4000)},
      {"token-shard", slurp(path("good-shards/train.bin"))},
      {"nul-bytes", Bytes(100, '\0')},
      {"one-long-line", long_line + "\n"}};
  for (const auto& [name, bytes] : bad_text) {
    const std::string file = path("bad-text/" + name);
    spit(file, bytes);
    check("tokenize train " + name, "tokenize train --vocab 300 " + file + " --out " + path("t.model"), {path("t.model")});
    check("tokenize encode " + name, "tokenize encode " + file + " --out " + path("shards"), {path("shards")});
    check("train gpt text " + name, kGptFlags + " --steps 1 --data " + file + " --out " + path("out"), {path("out")});
  }
  for (const std::string& file : {path("nowhere"), path("bad-tok")}) {
    check("tokenize train " + file, "tokenize train --vocab 300 " + file + " --out " + path("t.model"), {path("t.model")});
    check("tokenize encode " + file, "tokenize encode " + file + " --out " + path("shards"), {path("shards")});
  }
  check("tokenize train out a directory", "tokenize train --vocab 300 " + path("text") + " --out " + path("mnist"));
  check("tokenize encode out a file", "tokenize encode " + path("text") + " --out " + path("text"));
}

TEST_F(BadInputs, PlanAndDtypeValues) {
  for (const char* args : {"plan --params garbage", "plan --params 1e400", "plan --params -7B", "plan --model gpt --layers 0",
                                  "plan --model gpt --heads 7", "plan", "dtype garbage", "dtype 1e999", "dtype nan inf -inf",
                                  "dtype --scale 0 1", "dtype ''"})
    check(args, args);
}

}  // namespace
}  // namespace weft
