// An image folder: one subfolder per class holding that class's PNG and JPEG files, as
// torchvision's ImageFolder reads it. The classes are the subfolders' names in sorted (byte)
// order and a class's id is its place there; the files of a class are read in name order.
//
// What is read: files whose names end in .png, .jpg or .jpeg (any case), at any depth below the
// class's folder. Hidden files and folders (a leading '.') and files with other extensions are
// skipped and counted, so a README or a .DS_Store does not stop a run; a file with an image
// extension that does not decode stops it (data/image_file.h), naming the file. Every failure is
// one error naming the folder or file: a missing folder (IOError), fewer than two classes, a
// class without a single image (ValueError).
//
// The images become u8 [N, C, H, W] (data/dataset.h's ImageDataset) at one size and one channel
// count: unset, the channels are 3 when any image is in colour, else 1, and the size is the
// images' own, which must then be the same for all (ValueError naming two files that differ).
// Given, every image is resized (bilinear) and converted (data/image_file.h). The images read
// and the tensor made of them are held within io::usable_memory_bytes() (OutOfMemoryError naming
// the file that would exceed it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/data/dataset.h"

namespace weft::data {

struct ImageFolderListing {
  std::vector<std::string> classes;  // class names by id
  std::vector<std::string> files;    // class by class
  std::vector<int64_t> labels;       // each file's class id
  int64_t skipped = 0;               // hidden files and files without an image extension
};

// With `classes` empty the folder's subfolders are the classes. Given (the classes a model was
// trained on), each subfolder must be one of them (ValueError naming it) and takes its id there;
// a class may have no subfolder, and the folder may hold a single class.
ImageFolderListing list_image_folder(const std::string& dir, const std::vector<std::string>& classes = {});

// DIR/train and DIR/test (or DIR/val when there is no test) when DIR has both as folders: a data
// set that comes with its held-out part. nullopt otherwise.
std::optional<std::pair<std::string, std::string>> train_test_folders(const std::string& dir);

struct ImageFormat {
  int64_t channels = 0, height = 0, width = 0;  // 0: from the images
};

// The files as u8 [N, C, H, W], in order. `format`'s unset fields are decided from the images
// and written back, so that a second call with the same format makes images of the same shape.
Tensor read_images(const std::vector<std::string>& files, ImageFormat& format);

// Per-channel mean and standard deviation (population) of the pixels / 255 of u8 [N, C, H, W]:
// the statistics torchvision users compute over their training images. A channel that is
// constant gets std 1, so that normalising it only centres it.
Normalization measure_normalization(const Tensor& images);

}  // namespace weft::data
