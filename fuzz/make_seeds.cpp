// Writes the seed corpus of each fuzz target (targets.h) into DIR/<target>/: valid files made by
// weft's own writers (named valid-*, which the replay test requires to be accepted) and a few
// hand-made bad ones (bad-*) at the edges a fuzzer takes long to reach: sizes that overflow,
// counts larger than the file, nesting deeper than a stack.
//   fuzz_seeds DIR
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "targets.h"
#include "weft/data/text.h"
#include "weft/io/safetensors.h"

namespace fs = std::filesystem;
using namespace weft;

namespace {

fs::path root;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

// A safetensors file whose header is `json`, followed by `data`.
std::string safetensors(const std::string& json, const std::string& data = "") {
  return le64(json.size()) + json + data;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string idx(uint8_t type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) out += be32(d);
  return out + data;
}

std::string gzip(const std::string& bytes) {
  fs::path tmp = root / "tmp.gz";
  gzFile f = gzopen(tmp.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  std::string out = slurp(tmp);
  fs::remove(tmp);
  return out;
}

void safetensors_seeds() {
  fs::path tmp = root / "tmp.safetensors";
  io::save_safetensors(tmp, {{"weight", Tensor::arange(6).reshape({2, 3})},
                             {"ids", Tensor::arange(3, DType::i64)},
                             {"mask", Tensor::ones({2}, DType::boolean)},
                             {"half", Tensor::arange(2, DType::bf16)},
                             {"empty", Tensor::empty({0, 4})}},
                       {{"format", "pt"}, {"weft.model", "mlp"}});
  const std::string tensors = slurp(tmp);
  seed("safetensors", "valid-tensors", tensors);
  // The same file with its last data byte changed: its weft.checksum no longer matches.
  seed("safetensors", "bad-checksum-mismatch", tensors.substr(0, tensors.size() - 1) + static_cast<char>(~tensors.back()));
  io::save_safetensors(tmp, {});
  seed("safetensors", "valid-empty", slurp(tmp));
  fs::remove(tmp);
  const std::string f32 = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  seed("safetensors", "bad-header-length-huge", le64(~uint64_t{0}) + "{}");
  seed("safetensors", "bad-shape-overflows-u64",
       safetensors(R"({"x":{"dtype":"F32","shape":[18446744073709551617],"data_offsets":[0,8]}})", "12345678"));
  seed("safetensors", "bad-shape-product-overflows",
       safetensors(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", "12345678"));
  seed("safetensors", "bad-offsets-past-end", safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4096]}})", "12345678"));
  seed("safetensors", "bad-duplicate-key", safetensors("{" + f32 + "," + f32 + "}", "12345678"));
  seed("safetensors", "bad-metadata-not-strings", safetensors(R"({"__metadata__":{"weft.step":[1,{"a":null}]}})"));
  seed("safetensors", "bad-object-nested-deep",
       safetensors(R"({"__metadata__":)" + [] {
         std::string s;
         for (int i = 0; i < 5000; ++i) s += R"({"a":)";
         return s + "1" + std::string(5000, '}');
       }() + "}"));
}

void idx_seeds() {
  seed("idx", "valid-u8-images", idx(0x08, {2, 2, 3}, std::string("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\xfe\xff", 12)));
  seed("idx", "valid-u8-labels", idx(0x08, {4}, std::string("\x00\x09\x03\x01", 4)));
  seed("idx", "valid-i16", idx(0x0B, {2}, std::string("\x80\x00\x7f\xff", 4)));
  seed("idx", "valid-i32", idx(0x0C, {1, 1}, std::string("\xff\xff\xff\xfe", 4)));
  seed("idx", "valid-f32", idx(0x0D, {1}, std::string("\x3f\x80\x00\x00", 4)));
  seed("idx", "valid-f64", idx(0x0E, {1}, std::string("\x7f\xf0\x00\x00\x00\x00\x00\x00", 8)));
  seed("idx", "valid-gzip", gzip(idx(0x08, {3, 2}, "abcdef")));
  seed("idx", "bad-magic", std::string("\x01\x00\x08\x01\x00\x00\x00\x01x", 9));
  seed("idx", "bad-type", idx(0x0A, {1}, "x"));
  seed("idx", "bad-no-dims", idx(0x08, {}, ""));
  seed("idx", "bad-dims-overflow", idx(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, "12345678"));
  seed("idx", "bad-claims-more-than-file", idx(0x08, {60000, 28, 28}, "x"));
  seed("idx", "bad-trailing", idx(0x08, {1}, "xy"));
  seed("idx", "bad-gzip-bomb-claim", gzip(idx(0x0D, {0x7fffffff, 0x7fffffff}, "")));
  std::string corrupt = gzip(idx(0x08, {8}, "abcdefgh"));
  corrupt[corrupt.size() / 2] ^= 0x55;
  seed("idx", "bad-gzip-corrupt", corrupt);
  std::string cut = gzip(idx(0x08, {64}, std::string(64, 'z')));
  seed("idx", "bad-gzip-truncated", cut.substr(0, cut.size() - 6));
}

void token_shard_seeds() {
  fs::path tmp = root / "tmp.bin";
  data::TokenShard shard{"byte", 256, {72, 105, 33, 10, 37, 10, 0, 255}, {}};
  data::write_token_shard(tmp, shard);
  std::string valid = slurp(tmp);
  seed("token_shard", "valid-byte", valid);
  data::write_token_shard(tmp, {"sentencepiece:0123456789abcdef", 65536, {65535, 0, 1}, {}});
  seed("token_shard", "valid-vocab-65536", slurp(tmp));
  fs::remove(tmp);
  auto patched = [&](size_t at, const std::string& bytes) { return valid.substr(0, at) + bytes + valid.substr(at + bytes.size()); };
  seed("token_shard", "bad-version", patched(8, std::string("\x02\0\0\0", 4)));
  seed("token_shard", "bad-width", patched(12, std::string("\x04\0\0\0", 4)));
  seed("token_shard", "bad-vocab-zero", patched(16, std::string(4, '\0')));
  seed("token_shard", "bad-token-outside-vocab", patched(16, std::string("\x10\0\0\0", 4)));
  seed("token_shard", "bad-identity-length-huge", patched(20, std::string("\xff\xff\xff\xff", 4)));
  seed("token_shard", "bad-count-huge", patched(24, le64(~uint64_t{0})));
  seed("token_shard", "bad-count-times-width-wraps", patched(24, le64(uint64_t{1} << 63)));
  seed("token_shard", "bad-truncated", valid.substr(0, valid.size() - 3));
}

void checkpoint_seeds() {
  const std::string valid = fuzz::valid_checkpoint_input();
  const std::string trainer = valid.substr(0, valid.find('\0'));
  seed("checkpoint", "valid-trainer-json", trainer);
  seed("checkpoint", "valid-trainer-json-and-optimizer", valid);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string out = trainer;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  seed("checkpoint", "bad-epoch-string", replaced(R"("epoch": 1)", R"("epoch": "1")"));
  seed("checkpoint", "bad-epoch-huge", replaced(R"("epoch": 1)", R"("epoch": 1e300)"));
  seed("checkpoint", "bad-epoch-negative", replaced(R"("epoch": 1)", R"("epoch": -9223372036854775808)"));
  seed("checkpoint", "bad-step-float", replaced(R"("step": 3)", R"("step": 3.5)"));
  seed("checkpoint", "bad-rng-word", replaced(R"("rng": [)", R"("rng": ["99999999999999999999999",)"));
  seed("checkpoint", "bad-rng-numbers", replaced(R"("rng": [)", R"("rng": [1, 2, 3, 4], "old_rng": [)"));
  seed("checkpoint", "bad-options-array", replaced(R"("options": )", R"("options": [1], "x": )"));
  seed("checkpoint", "bad-grad-scaler-types",
       replaced(R"("epoch": 1)", R"("epoch": 1, "grad_scaler": {"scale": "big", "growth_tracker": [], "skipped_steps": null})"));
  seed("checkpoint", "bad-top-level-array", "[1, 2, 3]");
  seed("checkpoint", "bad-nested-deep", std::string(10000, '[') + std::string(10000, ']'));
  seed("checkpoint", "bad-optimizer-garbage", trainer + '\0' + "not a safetensors file");
}

// Requests as a client sends them to weft serve; the bad ones are the attacks a server must turn
// away (each must be answered 4xx, never crash or stall it).
std::string http_post(const std::string& path, const std::string& body, const std::string& headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

void http_seeds() {
  std::string pixels;
  for (int i = 0; i < 784; ++i) pixels += (i ? "," : "") + std::to_string(i * 37 % 256);
  const std::string predict = http_post("/v1/predict", "{\"inputs\": [[" + pixels + "]], \"top_k\": 2}");
  seed("http", "valid-predict", predict);
  seed("http", "valid-completion", http_post("/v1/completions", R"({"prompt": "ab", "max_tokens": 3, "seed": 1})"));
  seed("http", "valid-stream", http_post("/v1/completions", R"({"prompt": "a", "max_tokens": 2, "stream": true, "model": "lm"})"));
  seed("http", "valid-pipelined", "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n" +
                                      std::string("GET /metrics HTTP/1.0\r\n\r\n"));
  seed("http", "valid-chunked", "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n16;x=y\r\nmpt\": \"a\", \"top_k\": 3}\r\n0\r\n\r\n");
  seed("http", "bad-nested-deep", http_post("/v1/completions", "{\"prompt\": \"a\", \"seed\": " + std::string(20000, '[') +
                                                                 std::string(20000, ']') + "}"));
  seed("http", "bad-pixel-nested-deep", http_post("/v1/predict", "{\"inputs\": [" + std::string(20000, '[') + std::string(20000, ']') + "]}"));
  seed("http", "bad-number-out-of-range", http_post("/v1/completions", R"({"prompt": "a", "temperature": 1e400})"));
  seed("http", "bad-duplicate-key", http_post("/v1/completions", R"({"prompt": "a", "prompt": "b"})"));
  seed("http", "bad-gzip", http_post("/v1/completions", "\x1f\x8b\x08", "Content-Encoding: gzip\r\n"));
  seed("http", "bad-chunk-size-huge", "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                                      "Transfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n");
  seed("http", "bad-two-lengths", "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}");
  seed("http", "bad-length-negative", "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n");
  seed("http", "bad-text-plain", http_post("/v1/predict", "{}").replace(http_post("/v1/predict", "{}").find("application/json"), 16, "text/plain"));
  seed("http", "bad-origin", http_post("/v1/predict", "{\"inputs\": [[" + pixels + "]]}", "Origin: http://evil.example\r\n"));
  seed("http", "bad-host", "GET /healthz HTTP/1.1\r\nHost: evil.example:8080\r\n\r\n");
  seed("http", "bad-prompt-too-long", http_post("/v1/completions", "{\"prompt\": \"" + std::string(2000, 'a') + "\"}"));
  seed("http", "bad-header-control", "GET /healthz HTTP/1.1\r\nHost: h\r\nX: \x1b[2J\r\n\r\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  root = argv[1];
  fs::create_directories(root);
  safetensors_seeds();
  idx_seeds();
  token_shard_seeds();
  checkpoint_seeds();
  http_seeds();
  return 0;
}
