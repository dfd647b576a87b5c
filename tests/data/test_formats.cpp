// IDX, MNIST-style and CIFAR-10 files: round trips, every malformed input, real Fashion-MNIST.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"
#include "weft/data/cifar.h"
#include "weft/data/dataset.h"
#include "weft/data/idx.h"

namespace weft::data {
namespace {

using weft::testing::contains;
using weft::testing::message_of;
using weft::testing::TempDir;

using Bytes = std::string;

inline void write_file(const std::string& path, const Bytes& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

inline void append_big_endian(Bytes& out, uint64_t value, int width) {
  for (int i = width - 1; i >= 0; --i) out.push_back(static_cast<char>(value >> (8 * i)));
}

inline Bytes idx_header(uint8_t type_code, const std::vector<uint32_t>& dims) {
  Bytes out{0, 0, static_cast<char>(type_code), static_cast<char>(dims.size())};
  for (uint32_t d : dims) append_big_endian(out, d, 4);
  return out;
}

// A u8 IDX file: header then the bytes as they are.
inline Bytes idx_u8(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
  return idx_header(0x08, dims) + Bytes(values.begin(), values.end());
}

template <typename T>
Bytes big_endian_values(const std::vector<T>& values) {
  Bytes out;
  for (T v : values) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    append_big_endian(out, bits, sizeof(T));
  }
  return out;
}

// Writes `values` as IDX type `code`, reads it back (plain and gzipped) and compares with the
// values as `Stored`, the weft type that code maps to.
template <typename File, typename Stored>
void expect_round_trip(uint8_t code, const std::vector<File>& values, DType dtype) {
  TempDir dir;
  std::vector<uint32_t> dims{2, static_cast<uint32_t>(values.size() / 2)};
  Bytes bytes = idx_header(code, dims) + big_endian_values(values);
  for (bool gzip : {false, true}) {
    std::string path = dir.file(gzip ? "t.gz" : "t");
    write_file(path, bytes, gzip);
    Tensor t = read_idx(path);
    EXPECT_EQ(t.dtype(), dtype) << path;
    EXPECT_EQ(t.shape(), (Shape{2, static_cast<int64_t>(values.size() / 2)}));
    EXPECT_EQ(t.to_vector<Stored>(), std::vector<Stored>(values.begin(), values.end())) << path;
  }
}

TEST(Idx, RoundTripsEveryTypeCode) {
  expect_round_trip<uint8_t, uint8_t>(0x08, {0, 1, 127, 128, 200, 255}, DType::u8);
  expect_round_trip<int8_t, int8_t>(0x09, {-128, -1, 0, 1, 100, 127}, DType::i8);
  expect_round_trip<int16_t, int32_t>(0x0B, {-32768, -1, 0, 1, 258, 32767}, DType::i32);
  expect_round_trip<int32_t, int32_t>(0x0C, {std::numeric_limits<int32_t>::min(), -1, 0, 1, 0x01020304,
                                             std::numeric_limits<int32_t>::max()},
                                      DType::i32);
  expect_round_trip<float, float>(0x0D, {-2.5f, 0.f, 1e-40f, 3.25f, 1e30f, -INFINITY}, DType::f32);
  expect_round_trip<double, double>(0x0E, {-2.5, 0., 1e-310, 3.25, 1e300, 1.0 / 3}, DType::f64);
}

TEST(Idx, ReadsThreeDimensionsRowMajor) {
  TempDir dir;
  std::vector<uint8_t> values(2 * 3 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i);
  write_file(dir.file("x"), idx_u8({2, 3, 4}, values));
  Tensor t = read_idx(dir.file("x"));
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.at({1, 2, 3}), 23);
  EXPECT_EQ(t.at({1, 0, 2}), 14);
}

TEST(Idx, MissingFileIsAnIOErrorNamingThePath) {
  TempDir dir;
  std::string msg = message_of<IOError>([&] { read_idx(dir.file("nope-idx3-ubyte")); });
  EXPECT_TRUE(contains(msg, dir.file("nope-idx3-ubyte"))) << msg;
}

// Each malformed file gives a FormatError naming the path and containing `what`.
void expect_format_error(const Bytes& bytes, const std::string& what) {
  TempDir dir;
  for (bool gzip : {false, true}) {
    std::string path = dir.file(gzip ? "bad.gz" : "bad");
    write_file(path, bytes, gzip);
    std::string msg = message_of<FormatError>([&] { read_idx(path); });
    EXPECT_TRUE(contains(msg, path) && contains(msg, what)) << msg;
  }
}

TEST(Idx, MalformedFilesAreFormatErrors) {
  Bytes good = idx_u8({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_format_error(Bytes("\x01\xab\x08\x02") + good.substr(4), "expected magic bytes 00 00, found 01 ab");
  expect_format_error(Bytes("\0\0\x07\x01", 4) + good.substr(4), "found 07");
  expect_format_error(good.substr(0, 3), "truncated header");
  expect_format_error(good.substr(0, 9), "truncated header: expected 12 bytes, found 9");
  expect_format_error(idx_header(0x08, {}), "expected at least one dimension, found 0");
  expect_format_error(idx_u8({2, 0, 3}, {}), "expected nonzero dimensions, found [2, 0, 3]");
  expect_format_error(good.substr(0, good.size() - 1), "truncated");
  expect_format_error(good + "x", "trailing bytes");
  expect_format_error(idx_header(0x0D, {3}) + big_endian_values<float>({1, 2}), "truncated");
}

TEST(Idx, AbsurdDimensionsFailBeforeAllocating) {
  // 2^32-1 cubed elements would overflow 64 bits; the bound from the file size catches it.
  expect_format_error(idx_header(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}) + Bytes(64, '\0'),
                      "needs more data than the file can hold");
}

TEST(Idx, CorruptGzipIsAFormatError) {
  TempDir dir;
  write_file(dir.file("x.gz"), idx_u8({4, 1000}, std::vector<uint8_t>(4000, 7)), true);
  Bytes bytes;
  {
    std::FILE* f = std::fopen(dir.file("x.gz").c_str(), "rb");
    for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(static_cast<char>(c));
    std::fclose(f);
  }
  bytes[bytes.size() - 6] ^= 0x55;  // the CRC-32 in the gzip trailer
  write_file(dir.file("x.gz"), bytes);
  std::string msg = message_of<FormatError>([&] { read_idx(dir.file("x.gz")); });
  EXPECT_TRUE(contains(msg, dir.file("x.gz")) && contains(msg, "gzip")) << msg;
}

TEST(Idx, GzipCutShortIsAFormatErrorEvenWithEveryDataByte) {
  TempDir dir;
  write_file(dir.file("x.gz"), idx_u8({2, 3}, {1, 2, 3, 4, 5, 6}), true);
  Bytes bytes;
  {
    std::FILE* f = std::fopen(dir.file("x.gz").c_str(), "rb");
    for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(static_cast<char>(c));
    std::fclose(f);
  }
  for (size_t cut : {size_t{3}, size_t{8}}) {  // into the trailer (CRC-32, length), or only its length
    write_file(dir.file("x.gz"), bytes.substr(0, bytes.size() - cut));
    std::string msg = message_of<FormatError>([&] { read_idx(dir.file("x.gz")); });
    EXPECT_TRUE(contains(msg, dir.file("x.gz")) && contains(msg, "truncated gzip stream")) << msg;
  }
}

TEST(Idx, OnlyRegularFilesAreRead) {
  TempDir dir;
  std::string msg = message_of<IOError>([&] { read_idx(dir.path()); });
  EXPECT_TRUE(contains(msg, dir.path()) && contains(msg, "expected a regular file, found a directory")) << msg;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  msg = message_of<IOError>([&] { read_idx(dir.file("fifo")); });  // would block forever if opened
  EXPECT_TRUE(contains(msg, "found a FIFO")) << msg;
}

// An MNIST-style directory: `n` 2x3 images whose pixel j of image i is 10 i + j, labels i % 10.
void write_mnist(const TempDir& dir, const std::string& split, int n, bool gzip) {
  std::vector<uint8_t> pixels, labels;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 6; ++j) pixels.push_back(static_cast<uint8_t>(10 * i + j));
    labels.push_back(static_cast<uint8_t>(i % 10));
  }
  std::string ext = gzip ? ".gz" : "";
  write_file(dir.file(split + "-images-idx3-ubyte" + ext), idx_u8({static_cast<uint32_t>(n), 2, 3}, pixels), gzip);
  write_file(dir.file(split + "-labels-idx1-ubyte" + ext), idx_u8({static_cast<uint32_t>(n)}, labels), gzip);
}

TEST(Mnist, LoadsPlainOrGzippedSplits) {
  TempDir dir;
  write_mnist(dir, "train", 12, true);
  write_mnist(dir, "t10k", 3, false);
  Normalization identity{{0.f}, {1.f}};
  ImageDataset train = load_mnist_idx(dir.path(), true, identity), test = load_mnist_idx(dir.path(), false, identity);
  EXPECT_EQ(train.size(), 12);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(train.images().shape(), (Shape{12, 1, 2, 3}));
  EXPECT_EQ(train.labels().dtype(), DType::i64);
  EXPECT_EQ(train.labels().at({11}), 1);
  EXPECT_EQ(train.images().at({11, 0, 1, 2}), 115);
  Batch b = train.get_batch({11, 0});
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 1, 2, 3}));
  EXPECT_FLOAT_EQ(b.inputs.at({0, 0, 1, 2}), 115 / 255.f);
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
}

TEST(Mnist, BadDirectoriesName) {
  TempDir dir;
  Normalization identity{{0.f}, {1.f}};
  std::string msg = message_of<IOError>([&] { load_mnist_idx(dir.path(), true, identity); });
  EXPECT_TRUE(contains(msg, "train-images-idx3-ubyte") && contains(msg, dir.path())) << msg;

  write_mnist(dir, "train", 4, false);
  write_file(dir.file("train-labels-idx1-ubyte"), idx_u8({5}, {0, 1, 2, 3, 4}));
  msg = message_of<FormatError>([&] { load_mnist_idx(dir.path(), true, identity); });
  EXPECT_TRUE(contains(msg, dir.file("train-labels-idx1-ubyte")) && contains(msg, "(4), found 5")) << msg;

  write_file(dir.file("train-labels-idx1-ubyte"), idx_u8({4}, {0, 1, 10, 3}));
  msg = message_of<FormatError>([&] { load_mnist_idx(dir.path(), true, identity); });
  EXPECT_TRUE(contains(msg, dir.file("train-labels-idx1-ubyte")) && contains(msg, "found 10 at index 2")) << msg;

  write_file(dir.file("train-images-idx3-ubyte"), idx_u8({4, 6}, std::vector<uint8_t>(24)));
  msg = message_of<FormatError>([&] { load_mnist_idx(dir.path(), true, identity); });
  EXPECT_TRUE(contains(msg, dir.file("train-images-idx3-ubyte")) && contains(msg, "[N, H, W]")) << msg;
}

TEST(ImageDataset, NormalisesPerChannelThroughTheTable) {
  Tensor images = Tensor::from_vector<uint8_t>({0, 255, 51, 102, 0, 255, 51, 102}, {1, 2, 2, 2});
  ImageDataset ds(images, Tensor::from_vector<int64_t>({7}, {1}), {{0.2f, 0.4f}, {0.5f, 0.25f}});
  Batch b = ds.get_batch({0, 0});
  EXPECT_EQ(b.inputs.dtype(), DType::f32);
  std::vector<float> one{-0.4f, 1.6f, 0.f, 0.4f, -1.6f, 2.4f, -0.8f, 0.f};
  std::vector<float> got = b.inputs.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], one[i % 8], 1e-6) << i;
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{7, 7}));
}

TEST(ImageDataset, RejectsBadArguments) {
  Tensor images = Tensor::zeros({2, 3, 4, 4}, DType::u8), labels = Tensor::zeros({2}, DType::i64);
  message_of<DTypeError>([&] { ImageDataset(images.to(DType::f32), labels, kCifar10Normalization); });
  message_of<ShapeError>([&] { ImageDataset(images, Tensor::zeros({3}, DType::i64), kCifar10Normalization); });
  std::string msg = message_of<ValueError>([&] { ImageDataset(images, labels, kMnistNormalization); });
  EXPECT_TRUE(contains(msg, "expected 3 normalisation means")) << msg;
  message_of<ValueError>([&] { ImageDataset(images, labels, {{0, 0, 0}, {1, 0, 1}}); });
  ImageDataset ds(images, labels, kCifar10Normalization);
  msg = message_of<IndexError>([&] { ds.get_batch({0, 2}); });
  EXPECT_TRUE(contains(msg, "index 2 is outside [0, 2)")) << msg;
}

// CIFAR-10 records whose label is (first + r) % 10 and whose channel c pixels are all 10 c + r.
Bytes cifar_records(int count, int first) {
  Bytes out;
  for (int r = 0; r < count; ++r) {
    out.push_back(static_cast<char>((first + r) % 10));
    for (int c = 0; c < 3; ++c) out += Bytes(1024, static_cast<char>(10 * c + r));
  }
  return out;
}

TEST(Cifar10, LoadsTrainAndTestSplits) {
  TempDir dir;
  for (int i = 1; i <= 5; ++i) write_file(dir.file("data_batch_" + std::to_string(i) + ".bin"), cifar_records(i, i));
  write_file(dir.file("test_batch.bin"), cifar_records(2, 7));
  ImageDataset train = load_cifar10(dir.path(), true), test = load_cifar10(dir.path(), false);
  EXPECT_EQ(train.images().shape(), (Shape{15, 3, 32, 32}));
  EXPECT_EQ(test.size(), 2);
  // Record 1 of data_batch_5 (files in order: 1 + 2 + 3 + 4 records before it).
  EXPECT_EQ(train.labels().at({11}), 6);
  EXPECT_EQ(train.images().at({11, 2, 31, 0}), 21);
  EXPECT_EQ(test.labels().to_vector<int64_t>(), (std::vector<int64_t>{7, 8}));
  Batch b = test.get_batch({1});
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_NEAR(b.inputs.at({0, c, 5, 7}), ((10 * c + 1) / 255.0 - kCifar10Normalization.mean[c]) /
                                               kCifar10Normalization.std[c], 1e-5);
}

TEST(Cifar10, BadFilesName) {
  TempDir dir;
  std::string msg = message_of<IOError>([&] { load_cifar10(dir.path(), false); });
  EXPECT_TRUE(contains(msg, dir.file("test_batch.bin"))) << msg;
  write_file(dir.file("test_batch.bin"), cifar_records(2, 0).substr(0, 3073 + 100));
  msg = message_of<FormatError>([&] { load_cifar10(dir.path(), false); });
  EXPECT_TRUE(contains(msg, dir.file("test_batch.bin")) && contains(msg, "multiple of 3073")) << msg;
  Bytes bad = cifar_records(3, 0);
  bad[2 * 3073] = 10;
  write_file(dir.file("test_batch.bin"), bad);
  msg = message_of<FormatError>([&] { load_cifar10(dir.path(), false); });
  EXPECT_TRUE(contains(msg, dir.file("test_batch.bin")) && contains(msg, "found 10 in record 2")) << msg;
}

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnist, RealFilesLoad) {
  if (!std::filesystem::exists(kFashionMnist)) GTEST_SKIP() << kFashionMnist << " is absent";
  ImageDataset train = load_mnist_idx(kFashionMnist, true, kFashionMnistNormalization);
  ImageDataset test = load_mnist_idx(kFashionMnist, false, kFashionMnistNormalization);
  EXPECT_EQ(train.images().shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test.images().shape(), (Shape{10000, 1, 28, 28}));
  std::vector<int64_t> per_class(10);
  for (int64_t label : train.labels().to_vector<int64_t>()) ++per_class.at(label);
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 6000));
  for (int64_t label : test.labels().to_vector<int64_t>()) EXPECT_TRUE(label >= 0 && label <= 9);
  // The constants match the training set's statistics.
  double sum = 0, sum_sq = 0;
  const uint8_t* p = train.images().data<uint8_t>();
  int64_t n = train.images().numel();
  for (int64_t i = 0; i < n; ++i) {
    double x = p[i] / 255.0;
    sum += x;
    sum_sq += x * x;
  }
  double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, kFashionMnistNormalization.mean[0], 1e-4);
  EXPECT_NEAR(std, kFashionMnistNormalization.std[0], 1e-4);
}

}  // namespace
}  // namespace weft::data
