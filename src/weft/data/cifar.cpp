#include "weft/data/cifar.h"

#include <cstring>
#include <memory>
#include <vector>

#include "weft/io/input_file.h"

namespace weft::data {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

}  // namespace

ImageDataset load_cifar10(const std::string& dir, bool train, const Normalization& norm) {
  std::vector<std::string> paths;
  if (train)
    for (int i = 1; i <= 5; ++i) paths.push_back(str(dir, "/data_batch_", i, ".bin"));
  else
    paths.push_back(dir + "/test_batch.bin");

  // Every file is opened (a regular file, together no larger than memory) before the images are allocated.
  std::vector<std::unique_ptr<io::InputFile>> files;
  uint64_t total = 0;
  for (const std::string& path : paths) {
    files.push_back(std::make_unique<io::InputFile>(path, io::usable_memory_bytes() - total));
    const uint64_t bytes = files.back()->size();
    WEFT_CHECK(bytes % kRecord == 0, FormatError, "load_cifar10: '", path, "': expected a multiple of ", kRecord,
               " bytes (label + 3x32x32 pixels per record), found ", bytes, " (truncated?)");
    total += bytes;
  }
  const auto n = static_cast<int64_t>(total / kRecord);
  Tensor images = Tensor::empty({n, 3, 32, 32}, DType::u8), labels = Tensor::empty({n}, DType::i64);
  uint8_t* pixels = images.data<uint8_t>();
  int64_t* label = labels.data<int64_t>();
  std::vector<uint8_t> record(kRecord);
  for (const std::unique_ptr<io::InputFile>& file : files) {
    const auto count = static_cast<int64_t>(file->size() / kRecord);
    for (int64_t r = 0; r < count; ++r, pixels += kPixels, ++label) {
      file->read_at(record.data(), kRecord, static_cast<uint64_t>(r * kRecord));
      WEFT_CHECK(record[0] <= 9, FormatError, "load_cifar10: '", file->path(), "': expected labels 0..9, found ",
                 int{record[0]}, " in record ", r);
      *label = record[0];
      std::memcpy(pixels, record.data() + 1, kPixels);
    }
  }
  return ImageDataset(images, labels, norm);
}

}  // namespace weft::data
