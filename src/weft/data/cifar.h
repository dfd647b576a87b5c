// CIFAR-10's binary format: data_batch_1.bin … data_batch_5.bin (training, 10000 images each)
// and test_batch.bin, each a run of 3073-byte records: one label byte (0..9), then the 32x32
// image channel-major (1024 red, 1024 green, 1024 blue bytes, each plane row-major).
//
// load_cifar10 returns the records in file order as u8 images [N, 3, 32, 32] and i64 labels.
// A missing file → IOError; a file whose size is not a whole number of records or a label above
// 9 → FormatError naming the file.
#pragma once
#include <string>

#include "weft/data/dataset.h"

namespace weft::data {

ImageDataset load_cifar10(const std::string& dir, bool train, const Normalization& norm = kCifar10Normalization);

}  // namespace weft::data
