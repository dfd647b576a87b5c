// The fuzz targets: each hands a file's bytes to one of weft's file readers, the way a user's
// file reaches it, and reports whether the reader accepted them. Accepting, or refusing with a
// weft::Error, are the two correct outcomes; anything else (another exception, a crash, a hang,
// a sanitizer report) is a bug. libFuzzer drives these through fuzz/fuzz_<name>.cpp, and the
// test suite replays every file of tests/fuzz/corpus/<name>/ through the same functions, so a
// find stays fixed once it is checked in.
//
//   safetensors  load_safetensors and read_safetensors_header of the bytes as a .safetensors file
//   idx          read_idx of the bytes (plain or gzip)
//   token_shard  read_token_shard, then a TokenDataset's first and last windows when it has any
//   torch_checkpoint  read_torch_state_dict_header and load_torch_state_dict of the bytes as a
//                torch.save file (pytorch_model.bin); its seeds are files PyTorch wrote
//                (tests/io/torch_files.py)
//   checkpoint   load_checkpoint of a checkpoint (a Linear(3, 2) and its AdamW state) whose
//                trainer.json is the bytes up to the first NUL and, when there is a NUL, whose
//                optimizer.safetensors is the rest
//
//   http         the bytes as what a client sends `weft serve` (a classifier and a GPT): up to four
//                pipelined requests, each parsed whole and byte by byte (which must agree) and
//                answered; accepted when every one is answered below 400, and a 500 is a bug
//
// The readers take paths, so each call writes the bytes into a scratch directory of its own
// process (removed at exit) and reads them back from there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::fuzz {

// True when the reader accepted the bytes, false when it refused them with a weft::Error; any
// other exception propagates.
bool read_safetensors(std::string_view bytes);
bool read_idx(std::string_view bytes);
bool read_token_shard(std::string_view bytes);
bool read_checkpoint(std::string_view bytes);
bool read_torch_checkpoint(std::string_view bytes);
bool answer_http(std::string_view bytes);

// The checkpoint target's valid input: the trainer.json of the checkpoint it edits, a NUL, and
// that checkpoint's optimizer.safetensors (for seeding the corpus).
std::string valid_checkpoint_input();

struct Target {
  const char* name;  // the corpus directory and the fuzzer's name: fuzz_<name>
  bool (*run)(std::string_view bytes);
};
inline constexpr Target kTargets[] = {{"safetensors", read_safetensors},
                                      {"idx", read_idx},
                                      {"token_shard", read_token_shard},
                                      {"checkpoint", read_checkpoint},
                                      {"torch_checkpoint", read_torch_checkpoint},
                                      {"http", answer_http}};

// For fuzz_<name>.cpp: libFuzzer's argument types.
inline std::string_view as_bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace weft::fuzz
