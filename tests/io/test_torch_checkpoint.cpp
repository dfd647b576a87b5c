// torch.save's state dicts read without PyTorch (io/torch_checkpoint.h), against files PyTorch
// wrote: tests/io/torch_files.py (Debian's python3-torch) saves every dtype, a strided view, a
// shared storage, a parameter, and the files weft must refuse.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/core/error.h"
#include "weft/io/atomic_file.h"
#include "weft/io/torch_checkpoint.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

const testing::TempDir& files() {
  static const testing::TempDir dir;
  static const int status = std::system(
      (std::string("OPENBLAS_NUM_THREADS=1 /usr/bin/python3 ") + WEFT_TORCH_FILES_SCRIPT + " " + dir.path()).c_str());
  EXPECT_EQ(status, 0) << "torch_files.py failed (it needs Debian's python3-torch)";
  return dir;
}

DType torch_dtype(const std::string& name) {
  static const std::map<std::string, DType> types = {
      {"float32", DType::f32}, {"float64", DType::f64}, {"float16", DType::f16}, {"bfloat16", DType::bf16},
      {"int64", DType::i64},   {"int32", DType::i32},   {"int8", DType::i8},     {"uint8", DType::u8},
      {"bool", DType::boolean}};
  return types.at(name);
}

TEST(TorchCheckpoint, EveryDtypeViewAndSharedStorageReadAsPyTorchWroteThem) {
  const std::string path = files().file("valid.pt");
  const nlohmann::ordered_json expected = nlohmann::ordered_json::parse(io::read_file(files().file("valid.json")));
  const std::vector<io::TorchTensorInfo> header = io::read_torch_state_dict_header(path);
  const std::vector<std::pair<std::string, Tensor>> loaded = io::load_torch_state_dict(path);
  ASSERT_EQ(loaded.size(), expected.size());
  ASSERT_EQ(header.size(), expected.size());
  size_t k = 0;
  for (const auto& [name, want] : expected.items()) {  // in the order saved
    SCOPED_TRACE(name);
    const Tensor& t = loaded[k].second;
    EXPECT_EQ(loaded[k].first, name);
    EXPECT_EQ(header[k].name, name);
    EXPECT_EQ(t.dtype(), torch_dtype(want["dtype"]));
    EXPECT_EQ(header[k].dtype, t.dtype());
    EXPECT_EQ(t.shape(), Shape(want["shape"].get<std::vector<int64_t>>()));
    EXPECT_EQ(header[k].shape, t.shape());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<double>(), want["values"].get<std::vector<double>>());
    ++k;
  }
}

TEST(TorchCheckpoint, APickleThatCallsAnythingButATensorsConstructorIsRefusedNamingIt) {
  const std::string message = message_of<FormatError>([] { io::load_torch_state_dict(files().file("calls.pt")); });
  EXPECT_TRUE(contains(message, "calls posix.system, which weft does not run")) << message;
  EXPECT_TRUE(contains(message, "calls.pt")) << message;
}

TEST(TorchCheckpoint, FilesThatAreNoStateDictOfTensorsAreRefusedSayingWhat) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"legacy.pt", "a torch.save file of the legacy format (PyTorch before 1.6)"},
      {"not_a_dict.pt", "holds a list, not a state dict"},
      {"not_tensors.pt", "'note' is a string, not a tensor"},
      {"int16.pt", "a storage of torch.ShortStorage, a type weft has no dtype for"},
      {"compressed.pt", "is compressed (method 8); torch.save stores its entries uncompressed"},
      {"truncated.pt", "truncated"},
      {"valid.json", "not a zip archive"}};
  for (const auto& [file, says] : cases) {
    SCOPED_TRACE(file);
    const std::string message = message_of<FormatError>([&] { io::read_torch_state_dict_header(files().file(file)); });
    EXPECT_TRUE(contains(message, says)) << message;
  }
}

// Every prefix of a valid file is refused with weft's error, never read past its end (the
// sanitizer build runs this too).
TEST(TorchCheckpoint, EveryTruncationIsRefused) {
  const std::string bytes = io::read_file(files().file("valid.pt"));
  testing::TempDir dir;
  const std::string path = dir.file("cut.pt");
  for (size_t n = 0; n < bytes.size(); n += 7) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(n));
    EXPECT_THROW(io::load_torch_state_dict(path), Error) << n << " of " << bytes.size() << " bytes";
  }
}

}  // namespace
}  // namespace weft
