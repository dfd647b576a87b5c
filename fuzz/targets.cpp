#include "targets.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "weft/core/error.h"
#include "weft/data/idx.h"
#include "weft/data/text.h"
#include "weft/data/tokenizer.h"
#include "weft/infer/metadata.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"
#include "weft/io/torch_checkpoint.h"
#include "weft/net/http.h"
#include "weft/nn/models.h"
#include "weft/core/random.h"
#include "weft/nn/linear.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/serve/server.h"
#include "weft/train/checkpoint.h"

namespace weft::fuzz {
namespace {

namespace fs = std::filesystem;

// This process's scratch directory, made on first use and removed at exit.
class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "weft_fuzz_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("fuzz: cannot make a scratch directory");
    path_ = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

const Scratch& scratch() {
  static const Scratch dir;
  return dir;
}

// Not a weft::Error: a harness that cannot write its own file must not pass as a refused input.
void write(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) throw std::runtime_error("fuzz: cannot write " + path);
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw std::runtime_error("fuzz: cannot read " + path);
  return bytes;
}

template <typename Read>
bool accepted(Read&& read) {
  try {
    read();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Reads every byte of a tensor, so a tensor whose bytes lie outside what was mapped is caught
// here rather than by whoever uses it first.
uint8_t touch(const Tensor& tensor) {
  const auto* bytes = static_cast<const uint8_t*>(tensor.data_ptr());
  uint8_t sum = 0;
  for (size_t i = 0; i < tensor.nbytes(); ++i) sum = static_cast<uint8_t>(sum + bytes[i]);
  return sum;
}

constexpr int64_t kCheckpointStep = 3;

// A valid checkpoint of a Linear(3, 2) after one AdamW step, made once per process: the target
// replaces its trainer.json (and optimizer.safetensors) in place and loads it. The model is that
// small so that a whole checkpoint input (trainer.json and optimizer.safetensors) stays under a
// kilobyte, which keeps libFuzzer's mutations on the bytes that matter.
struct Checkpoint {
  Checkpoint() : dir(scratch().file("checkpoint")) {
    nn::Linear model(3, 2);
    optim::AdamW optimizer(model.parameters(), optim::AdamWOptions{});
    sum(model(Tensor::ones({1, 3}))).backward();
    optimizer.step();  // so that the optimizer file holds moments, not only the parameter list
    train::TrainerState state;
    state.step = kCheckpointStep;
    state.epoch = 1;
    train::save_checkpoint(dir, model, "linear", optimizer, state);
    step_dir = io::current_checkpoint(dir);
    optimizer_bytes = read(step_dir + "/optimizer.safetensors");
  }
  std::string dir, step_dir, optimizer_bytes;
};

const Checkpoint& checkpoint() {
  static const Checkpoint made;
  return made;
}

// weft serve with a classifier and a GPT, small and seeded, made once per process.
serve::Server& http_server() {
  static serve::Server* server = [] {
    auto save = [](const std::string& file, const nn::Module& model, std::map<std::string, std::string> metadata) {
      nn::StateDict state = model.state_dict();
      metadata["format"] = "pt";
      io::save_safetensors(file, {state.begin(), state.end()}, metadata);
      return file;
    };
    manual_seed(3);
    auto mlp_metadata = infer::classifier_metadata("fashion-mnist");
    mlp_metadata["weft.model"] = "mlp";
    const std::string mlp = save(scratch().file("mlp.safetensors"), *nn::make_mlp(), mlp_metadata);
    nn::GPT gpt(nn::GPTConfig{.layers = 1, .heads = 2, .dim = 16, .context = 16, .vocab = 256});
    auto gpt_metadata = infer::gpt_metadata(gpt.config, data::ByteTokenizer());
    gpt_metadata["weft.model"] = "gpt";
    const std::string lm = save(scratch().file("gpt.safetensors"), gpt, gpt_metadata);
    serve::ServeOptions options;
    options.data_dir = scratch().file("no-data");
    options.max_body_bytes = 64 << 10;
    options.batch.threads = 1;
    return new serve::Server({{"", mlp}, {"lm", lm}}, options);  // kept for the process's life
  }();
  return *server;
}

// A stream's events gathered, as a client would read them.
class Collected : public net::Response::Writer {
 public:
  bool write(std::string_view bytes) override {
    text.append(bytes);
    return true;
  }
  std::string text;
};

}  // namespace

bool answer_http(std::string_view bytes) {
  net::Limits limits;
  limits.max_body_bytes = 64 << 10;
  // The bytes parsed whole, and again one byte at a time: a request must read the same either way.
  net::RequestParser whole(limits), bytewise(limits);
  bool all_good = true;
  for (int requests = 0; requests < 4 && !bytes.empty(); ++requests) {
    const size_t used = whole.feed(bytes);
    std::string kept;
    size_t given = 0;
    while (!bytewise.complete() && !bytewise.failed() && given < bytes.size()) {
      kept += bytes[given++];
      kept.erase(0, bytewise.feed(kept));
    }
    if (whole.complete() != bytewise.complete() || whole.failed() != bytewise.failed() ||
        whole.error_status() != bytewise.error_status() ||
        (whole.complete() && (used != given - kept.size() || whole.request().body != bytewise.request().body ||
                              whole.request().headers != bytewise.request().headers)))
      throw std::logic_error("the request parsed differently whole and byte by byte");
    if (!whole.complete()) return false;
    net::Response response = http_server().answer(whole.request());
    if (response.stream) {
      Collected events;
      response.stream(events);
    }
    if (response.status >= 500 && response.status != 503)
      throw std::logic_error("answered " + std::to_string(response.status) + ": " + response.body);
    all_good = all_good && response.status < 400;
    bytes.remove_prefix(used);
    whole.reset();
    bytewise.reset();
  }
  return all_good;
}

bool read_safetensors(std::string_view bytes) {
  const std::string path = scratch().file("input.safetensors");
  write(path, bytes);
  bool header = accepted([&] { io::read_safetensors_header(path); });
  bool whole = accepted([&] {
    io::SafetensorsFile file = io::load_safetensors(path);
    for (const auto& [name, tensor] : file.tensors) touch(tensor);
  });
  return header && whole;
}

bool read_torch_checkpoint(std::string_view bytes) {
  const std::string path = scratch().file("pytorch_model.bin");
  write(path, bytes);
  bool header = accepted([&] { io::read_torch_state_dict_header(path); });
  bool whole = accepted([&] {
    for (const auto& [name, tensor] : io::load_torch_state_dict(path)) touch(tensor);
  });
  return header && whole;
}

bool read_idx(std::string_view bytes) {
  const std::string path = scratch().file("input.idx");
  write(path, bytes);
  return accepted([&] { touch(data::read_idx(path)); });
}

bool read_token_shard(std::string_view bytes) {
  const std::string path = scratch().file("train.bin");
  write(path, bytes);
  return accepted([&] {
    data::TokenShard shard = data::read_token_shard(path);
    auto tokens = static_cast<int64_t>(shard.tokens.size());
    if (tokens < 2) return;
    data::TokenDataset windows(std::move(shard), std::min<int64_t>(tokens - 1, 8));
    windows.get_batch({0, windows.size() - 1});
  });
}

std::string valid_checkpoint_input() {
  return read(checkpoint().step_dir + "/trainer.json") + '\0' + checkpoint().optimizer_bytes;
}

bool read_checkpoint(std::string_view bytes) {
  const Checkpoint& saved = checkpoint();
  size_t nul = bytes.find('\0');
  write(saved.step_dir + "/trainer.json", bytes.substr(0, nul));
  write(saved.step_dir + "/optimizer.safetensors",
        nul == std::string_view::npos ? std::string_view(saved.optimizer_bytes) : bytes.substr(nul + 1));
  nn::Linear model(3, 2);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions{});
  return accepted([&] { train::load_checkpoint(saved.dir, model, "linear", optimizer); });
}

}  // namespace weft::fuzz
