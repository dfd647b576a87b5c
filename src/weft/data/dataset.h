// Datasets: what a DataLoader draws batches from.
//
// A Dataset holds size() samples, numbered 0..size()-1, and turns a list of those numbers into
// one Batch whose first dimension follows the list's order. get_batch is const and touches no
// autograd state, so the DataLoader may call it from its worker thread (one call at a time).
//
// ImageDataset keeps the images as u8 [N, C, H, W] (4x smaller than f32; MNIST's 60000 images
// are 47 MB) and normalises per batch: inputs are f32 (x / 255 - mean[c]) / std[c], targets the
// i64 labels. Normalisation goes through a 256-entry table per channel, so a batch costs one
// lookup per pixel.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/tensor.h"

namespace weft::data {

struct Batch {
  Tensor inputs;
  Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // An index outside [0, size()) → IndexError.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

// Per-channel statistics in units of [0, 1] pixel values (x / 255), one entry per channel.
struct Normalization {
  std::vector<float> mean;
  std::vector<float> std;
};
// Each data set's training-split statistics, as torchvision users quote them. Fashion-MNIST's
// measured by weft over all 60000 x 784 training pixels: mean 0.28604, std 0.35302.
inline const Normalization kMnistNormalization{{0.1307f}, {0.3081f}};
inline const Normalization kFashionMnistNormalization{{0.2860f}, {0.3530f}};
inline const Normalization kCifar10Normalization{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};

class ImageDataset : public Dataset {
 public:
  // images u8 [N, C, H, W], labels i64 [N], `norm` with C means and C positive stds; anything
  // else → DTypeError, ShapeError or ValueError.
  ImageDataset(Tensor images, Tensor labels, const Normalization& norm);
  int64_t size() const override { return labels_.size(0); }
  // inputs f32 [B, C, H, W] normalised, targets i64 [B].
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 private:
  Tensor images_;
  Tensor labels_;
  std::vector<std::array<float, 256>> table_;  // per channel: pixel byte → normalised value
};

// MNIST and Fashion-MNIST (same files, same naming): `dir` holds train-images-idx3-ubyte and
// train-labels-idx1-ubyte (train) or t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each
// plain or with .gz. Images become [N, 1, H, W]. Which statistics fit depends on the data set,
// which the files do not say, so the caller passes `norm`. A missing file → IOError; images
// that are not u8 [N, H, W], labels that are not u8 [N] or a label outside 0..9 → FormatError.
ImageDataset load_mnist_idx(const std::string& dir, bool train, const Normalization& norm);

}  // namespace weft::data
