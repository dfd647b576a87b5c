#include "weft/data/cifar.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace weft::data {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

struct FileClose {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

ImageDataset load_cifar10(const std::string& dir, bool train, const Normalization& norm) {
  std::vector<std::string> paths;
  if (train)
    for (int i = 1; i <= 5; ++i) paths.push_back(str(dir, "/data_batch_", i, ".bin"));
  else
    paths.push_back(dir + "/test_batch.bin");

  std::vector<int64_t> counts;
  for (const std::string& path : paths) {
    std::error_code ec;
    auto bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    WEFT_CHECK(!ec, IOError, "load_cifar10: cannot read '", path, "': ", ec.message());
    WEFT_CHECK(bytes % kRecord == 0, FormatError, "load_cifar10: '", path, "': expected a multiple of ", kRecord,
               " bytes (label + 3x32x32 pixels per record), found ", bytes, " (truncated?)");
    counts.push_back(bytes / kRecord);
  }
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  Tensor images = Tensor::empty({n, 3, 32, 32}, DType::u8), labels = Tensor::empty({n}, DType::i64);
  uint8_t* pixels = images.data<uint8_t>();
  int64_t* label = labels.data<int64_t>();
  std::vector<uint8_t> record(kRecord);
  for (size_t f = 0; f < paths.size(); ++f) {
    std::unique_ptr<std::FILE, FileClose> file(std::fopen(paths[f].c_str(), "rb"));
    WEFT_CHECK(file, IOError, "load_cifar10: cannot open '", paths[f], "': ", std::strerror(errno));
    for (int64_t r = 0; r < counts[f]; ++r, pixels += kPixels, ++label) {
      WEFT_CHECK(std::fread(record.data(), kRecord, 1, file.get()) == 1, IOError, "load_cifar10: cannot read record ",
                 r, " of '", paths[f], "'");
      WEFT_CHECK(record[0] <= 9, FormatError, "load_cifar10: '", paths[f], "': expected labels 0..9, found ",
                 int{record[0]}, " in record ", r);
      *label = record[0];
      std::memcpy(pixels, record.data() + 1, kPixels);
    }
  }
  return ImageDataset(images, labels, norm);
}

}  // namespace weft::data
