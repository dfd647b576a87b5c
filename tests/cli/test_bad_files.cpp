// Bad files and paths given to every command that reads one: a crafted safetensors header, a GPT
// checkpoint whose metadata lies, a corrupt trainer.json, a text SentencePiece cannot take, a
// symlink loop, a name too long, a FIFO, a directory or a device where a file belongs. Each is
// refused at once with one line on stderr naming the file and exit status 2 (never a crash, a
// hang or an "internal error"), and nothing is written.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "temp_dir.h"
#include "weft/io/atomic_file.h"
#include "weft_cli.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

std::string le64(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

// A safetensors file with `header` as its JSON and `data` after it.
void write_safetensors(const std::string& path, const std::string& header, const std::string& data = "") {
  std::ofstream(path, std::ios::binary) << le64(header.size()) << header << data;
}

// Exit status 2 and one error line naming the file (training may have logged its setup before).
void expect_refused(const std::string& args, const std::string& names) {
  const Outcome o = weft_cli(args);
  EXPECT_EQ(o.status, 2) << args << "\n" << o.output;
  const size_t last = o.output.rfind('\n', o.output.size() - 2);
  const std::string line = o.output.substr(last == std::string::npos ? 0 : last + 1);
  EXPECT_TRUE(line.starts_with("weft: ") && contains(line, names)) << args << "\n" << o.output;
  EXPECT_FALSE(contains(o.output, "internal error")) << o.output;
}

class BadFilesCli : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  // A tiny GPT checkpoint, trained once for the whole suite.
  static void SetUpTestSuite() {
    gpt_ = new TempDir;
    std::ofstream text(gpt_->file("text.txt"));
    for (int i = 0; i < 40; ++i) text << "line " << i << " of a small corpus about the sea\n%\n";
    text.close();
    const Outcome o = weft_cli("train --model gpt --layers 1 --heads 2 --dim 8 --context 8 --batch-size 4 --steps 2 "
                               "--threads 1 --data " + gpt_->file("text.txt") + " --out " + gpt_->file("run"));
    ASSERT_EQ(o.status, 0) << o.output;
  }
  static void TearDownTestSuite() { delete gpt_; }
  static std::string run_dir() { return gpt_->file("run"); }
  static std::string text() { return gpt_->file("text.txt"); }

  TempDir dir_;
  static TempDir* gpt_;
};
TempDir* BadFilesCli::gpt_ = nullptr;

TEST_F(BadFilesCli, CraftedSafetensorsHeadersAreRefusedByInfoAndEval) {
  const std::string deep = path("deep.safetensors");
  write_safetensors(deep, "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  const std::string huge = path("huge.safetensors");
  write_safetensors(huge, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})",
                    std::string(4, '\0'));
  const std::string lies = path("lies.safetensors");
  std::ofstream(lies, std::ios::binary) << le64(1000) << "{}";
  for (const std::string command : {"info ", "eval --model mlp --checkpoint "}) {
    expect_refused(command + deep, deep + ": header nests JSON more than 3 levels deep");
    expect_refused(command + huge, huge + ": tensor \"w\": data_offsets must be [begin, end]");
    expect_refused(command + lies, lies + ": header length 1000 runs past the end of the file");
  }
}

TEST_F(BadFilesCli, PathsThatAreNoRegularFileAreRefusedAtOnce) {
  fs::create_symlink("loop_b", path("loop_a"));
  fs::create_symlink("loop_a", path("loop_b"));
  const std::string loop = path("loop_a"), too_long = path(std::string(300, 'n'));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const std::string fifo = path("fifo");
  for (const std::string& command : std::vector<std::string>{"info ", "eval --checkpoint ", "generate --prompt hi --checkpoint ", "quantize --int8 --out " + path("q") + " ",
        "train --model gpt --steps 1 --data " + text() + " --out " + path("out") + " --resume "}) {
    expect_refused(command + loop, loop + ": " + std::strerror(ELOOP));
    expect_refused(command + too_long, std::strerror(ENAMETOOLONG));
  }
  for (const std::string& command : std::vector<std::string>{"info ", "tokenize encode " + text() + " --out " + path("enc") + " --tokenizer ",
                                     "train --model gpt --steps 1 --out " + path("out") + " --data "}) {
    expect_refused(command + fifo, fifo + ": expected a regular file, found a FIFO");
    expect_refused(command + "/dev/zero", "/dev/zero: expected a regular file, found a character device");
  }
  // A directory is GPT-2's tokenizer, its vocab.json and merges.txt.
  expect_refused("tokenize encode " + text() + " --out " + path("enc") + " --tokenizer " + dir_.path(),
                 dir_.path() + "/vocab.json is missing");
  expect_refused("tokenize encode " + text() + " --out " + path("enc") + " --tokenizer " + loop, loop);
  EXPECT_FALSE(fs::exists(path("out/latest")));  // (train makes --out and locks it before reading its inputs)
  EXPECT_FALSE(fs::exists(path("q")));
}

// A layer count of a billion in weft.gpt used to allocate until std::bad_alloc; now the count the
// metadata implies is compared with the tensors in the file first.
TEST_F(BadFilesCli, AGptWhoseMetadataLiesIsRefusedBeforeItIsBuilt) {
  const std::string model = path("model.safetensors");
  const std::string bytes = io::read_file(run_dir() + "/model.safetensors");
  const std::string from = "\\\"layers\\\":1", to = "\\\"layers\\\":1000";
  std::string header = bytes.substr(8, *reinterpret_cast<const uint64_t*>(bytes.data()));
  ASSERT_NE(header.find(from), std::string::npos) << header;
  header.replace(header.find(from), from.size(), to);
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream(model, std::ios::binary) << le64(header.size()) << header
                                         << bytes.substr(8 + *reinterpret_cast<const uint64_t*>(bytes.data()));
  for (const std::string command : {"eval --checkpoint ", "generate --prompt hi --checkpoint "})
    expect_refused(command + model, model + ": weft.gpt describes a GPT of ");
}

TEST_F(BadFilesCli, ACorruptTrainerStateIsRefusedNamingTheField) {
  const std::string out = path("resumed");
  fs::copy(run_dir(), out, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(out + "/.weft.lock");
  const std::string state = fs::canonical(out + "/trainer.json").string();
  const std::string good = io::read_file(state);
  const std::string resume = "train --model gpt --data " + text() + " --threads 1 --resume " + out + " --out " + out;
  struct Case {
    std::string from, to, says;
  };
  for (const Case& c :
       {Case{"\"step\": 2", "\"step\": -5", ": \"step\" must be an integer in [0, "},
        Case{"\"step\": 2", "\"step\": \"2\"", ": \"step\" must be an integer"},
        Case{"\"step\": 2", "\"step\": 1e400", " is not valid JSON"},
        Case{"\"epoch\": 0", "\"epoch\": 7", ": \"epoch\" must be an integer in [0, 2], found 7"},
        Case{"\"planned_steps\": 2", "\"planned_steps\": 1", ": options: \"planned_steps\" must be an integer in [2, "},
        Case{"\"model\": \"gpt\"", "\"model\": [\"gpt\"]", ": \"model\" must be a string"}}) {
    std::string bad = good;
    ASSERT_NE(bad.find(c.from), std::string::npos) << c.from;
    bad.replace(bad.find(c.from), c.from.size(), c.to);
    io::write_file_atomic(state, [&](std::FILE* f) { std::fwrite(bad.data(), 1, bad.size(), f); });
    expect_refused(resume, state + c.says);
  }
  EXPECT_EQ(fs::read_symlink(out + "/latest"), "step-00000002") << "nothing was saved";
}

TEST_F(BadFilesCli, TextSentencePieceCannotTakeIsRefusedBeforeItRuns) {
  std::string blob;
  while (blob.size() < 40000) blob += "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk+/";
  std::ofstream(path("blob.txt")) << io::read_file(text()) << blob << "\n";
  for (const char* type : {"bpe", "unigram"})
    expect_refused("tokenize train " + path("blob.txt") + " --type " + type + " --vocab 300 --out " + path("t.model"),
                   path("blob.txt") + ", document 41: has " + std::to_string(blob.size() + 1) +
                       " characters without a space");
  EXPECT_FALSE(fs::exists(path("t.model")));
}

}  // namespace
}  // namespace weft::testing
