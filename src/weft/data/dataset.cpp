#include "weft/data/dataset.h"

#include <filesystem>

#include "weft/data/idx.h"

namespace weft::data {

ImageDataset::ImageDataset(Tensor images, Tensor labels, const Normalization& norm)
    : images_(images.contiguous_untracked()), labels_(labels.contiguous_untracked()) {
  WEFT_CHECK(images_.dtype() == DType::u8 && labels_.dtype() == DType::i64, DTypeError,
             "ImageDataset: expected u8 images and i64 labels, found ", images_.dtype(), " and ", labels_.dtype());
  WEFT_CHECK(images_.dim() == 4 && labels_.dim() == 1 && labels_.size(0) == images_.size(0), ShapeError,
             "ImageDataset: expected images [N, C, H, W] and labels [N], found ", shape_str(images_.shape()), " and ",
             shape_str(labels_.shape()));
  size_t channels = static_cast<size_t>(images_.size(1));
  WEFT_CHECK(norm.mean.size() == channels && norm.std.size() == channels, ValueError, "ImageDataset: expected ",
             channels, " normalisation means and stds (one per channel), found ", norm.mean.size(), " and ",
             norm.std.size());
  for (size_t c = 0; c < channels; ++c) {
    WEFT_CHECK(norm.std[c] > 0, ValueError, "ImageDataset: expected positive stds, found ", norm.std[c],
               " for channel ", c);
    auto& row = table_.emplace_back();
    for (int x = 0; x < 256; ++x) row[x] = static_cast<float>((x / 255.0 - norm.mean[c]) / norm.std[c]);
  }
}

Batch ImageDataset::get_batch(const std::vector<int64_t>& indices) const {
  int64_t batch = static_cast<int64_t>(indices.size()), channels = images_.size(1);
  int64_t plane = images_.size(2) * images_.size(3);
  Batch out{Tensor::empty({batch, channels, images_.size(2), images_.size(3)}, DType::f32),
            Tensor::empty({batch}, DType::i64)};
  const uint8_t* pixels = images_.data<uint8_t>();
  const int64_t* labels = labels_.data<int64_t>();
  float* inputs = out.inputs.data<float>();
  int64_t* targets = out.targets.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) {
    int64_t k = indices[i];
    WEFT_CHECK(k >= 0 && k < size(), IndexError, "ImageDataset: index ", k, " is outside [0, ", size(), ")");
    targets[i] = labels[k];
    for (int64_t c = 0; c < channels; ++c) {
      const float* table = table_[c].data();
      const uint8_t* src = pixels + (k * channels + c) * plane;
      float* dst = inputs + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) dst[j] = table[src[j]];
    }
  }
  return out;
}

namespace {

std::string find_idx(const std::string& dir, const std::string& name) {
  for (const std::string& path : {dir + "/" + name, dir + "/" + name + ".gz"}) {
    std::error_code error;
    if (std::filesystem::exists(path, error)) return path;
  }
  throw IOError(str("load_mnist_idx: expected '", name, "' or '", name, ".gz' in '", dir, "', found neither"));
}

}  // namespace

ImageDataset load_mnist_idx(const std::string& dir, bool train, const Normalization& norm) {
  std::string split = train ? "train" : "t10k";
  std::string images_path = find_idx(dir, split + "-images-idx3-ubyte");
  std::string labels_path = find_idx(dir, split + "-labels-idx1-ubyte");
  Tensor images = read_idx(images_path), raw_labels = read_idx(labels_path);
  WEFT_CHECK(images.dtype() == DType::u8 && images.dim() == 3, FormatError, "load_mnist_idx: '", images_path,
             "': expected u8 images [N, H, W], found ", images.dtype(), " ", shape_str(images.shape()));
  WEFT_CHECK(raw_labels.dtype() == DType::u8 && raw_labels.dim() == 1, FormatError, "load_mnist_idx: '", labels_path,
             "': expected u8 labels [N], found ", raw_labels.dtype(), " ", shape_str(raw_labels.shape()));
  int64_t n = images.size(0);
  WEFT_CHECK(raw_labels.size(0) == n, FormatError, "load_mnist_idx: expected as many labels in '", labels_path,
             "' as images in '", images_path, "' (", n, "), found ", raw_labels.size(0));
  Tensor labels = Tensor::empty({n}, DType::i64);
  const uint8_t* src = raw_labels.data<uint8_t>();
  int64_t* dst = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    WEFT_CHECK(src[i] <= 9, FormatError, "load_mnist_idx: '", labels_path, "': expected labels 0..9, found ",
               int{src[i]}, " at index ", i);
    dst[i] = src[i];
  }
  Shape shape{n, 1, images.size(1), images.size(2)};
  return ImageDataset(images.as_strided(shape, contiguous_strides(shape), 0), labels, norm);
}

}  // namespace weft::data
