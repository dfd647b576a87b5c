// PNG and JPEG decoding, resizing, channel conversion, image folders and the per-class split:
// fixtures written with libpng's and libjpeg's own encoders, compared with the pixels put in.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/image_fixtures.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "weft/data/image_file.h"
#include "weft/data/image_folder.h"
#include "weft/data/split.h"
#include "weft/io/input_file.h"

namespace weft::data {
namespace {

using weft::testing::contains;
using weft::testing::make_image;
using weft::testing::message_of;
using weft::testing::TempDir;
using weft::testing::write_jpeg;
using weft::testing::write_png;

constexpr uint64_t kNoLimit = UINT64_MAX / 2;

Image gradient(int64_t h, int64_t w, int64_t c) {
  return make_image(h, w, c, [](int64_t y, int64_t x, int64_t ch) { return (y * 16 + x * 5 + ch * 40) % 256; });
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ImageFile, PngDecodesToTheExactPixelsWrittenGreyAndRgb) {
  TempDir dir;
  for (int64_t channels : {1, 3}) {
    const Image written = gradient(7, 9, channels);
    write_png(dir.file("a.png"), written);
    const Image read = decode_image(dir.file("a.png"), kNoLimit);
    EXPECT_EQ(read.height, 7);
    EXPECT_EQ(read.width, 9);
    EXPECT_EQ(read.channels, channels);
    EXPECT_EQ(read.pixels, written.pixels);
  }
}

TEST(ImageFile, JpegDecodesCloseToThePixelsWritten) {
  TempDir dir;
  // Smooth content, so that quality 100 loses little: every pixel within 4 levels of what went in.
  for (int64_t channels : {1, 3}) {
    const Image written =
        make_image(16, 24, channels, [](int64_t y, int64_t x, int64_t c) { return 40 + y * 6 + x * 3 + c * 20; });
    write_jpeg(dir.file("a.jpg"), written, 100);
    const Image read = decode_image(dir.file("a.jpg"), kNoLimit);
    ASSERT_EQ(read.channels, channels);
    ASSERT_EQ(read.pixels.size(), written.pixels.size());
    int worst = 0;
    for (size_t i = 0; i < read.pixels.size(); ++i) worst = std::max(worst, std::abs(read.pixels[i] - written.pixels[i]));
    EXPECT_LE(worst, 4) << channels << " channels";
  }
}

TEST(ImageFile, TheFormatComesFromTheContentNotTheName) {
  TempDir dir;
  const Image written = gradient(4, 5, 1);
  write_png(dir.file("a.png"), written);
  std::filesystem::rename(dir.file("a.png"), dir.file("really_a_png.jpg"));
  EXPECT_EQ(decode_image(dir.file("really_a_png.jpg"), kNoLimit).pixels, written.pixels);
}

TEST(ImageFile, CorruptTruncatedAndForeignFilesNameTheFileAndWhy) {
  TempDir dir;
  write_png(dir.file("good.png"), gradient(32, 32, 3));
  write_jpeg(dir.file("good.jpg"), gradient(32, 32, 3));
  const std::string png = bytes_of(dir.file("good.png")), jpeg = bytes_of(dir.file("good.jpg"));

  write_bytes(dir.file("cut.png"), png.substr(0, png.size() / 2));
  std::string msg = message_of<FormatError>([&] { decode_image(dir.file("cut.png"), kNoLimit); });
  EXPECT_TRUE(msg.starts_with(dir.file("cut.png") + ": not a valid PNG (libpng: ")) << msg;

  std::string flipped = png;
  // Inside the last IDAT's data (IEND and the IDAT's CRC are the last 16 bytes): its CRC no longer holds.
  flipped[flipped.size() - 20] = static_cast<char>(flipped[flipped.size() - 20] ^ 0x5a);
  write_bytes(dir.file("flipped.png"), flipped);
  msg = message_of<FormatError>([&] { decode_image(dir.file("flipped.png"), kNoLimit); });
  EXPECT_TRUE(msg.starts_with(dir.file("flipped.png") + ": not a valid PNG (libpng: ")) << msg;

  write_bytes(dir.file("cut.jpg"), jpeg.substr(0, jpeg.size() / 2));
  msg = message_of<FormatError>([&] { decode_image(dir.file("cut.jpg"), kNoLimit); });
  EXPECT_EQ(msg, dir.file("cut.jpg") + ": not a valid JPEG (libjpeg: Premature end of JPEG file)");

  write_bytes(dir.file("header_only.jpg"), jpeg.substr(0, 20));
  msg = message_of<FormatError>([&] { decode_image(dir.file("header_only.jpg"), kNoLimit); });
  EXPECT_TRUE(msg.starts_with(dir.file("header_only.jpg") + ": not a valid JPEG (libjpeg: ")) << msg;

  // CMYK, which libjpeg writes from four components.
  jpeg_compress_struct info;
  jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = 8;
  info.image_height = 8;
  info.input_components = 4;
  info.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&info);
  jpeg_start_compress(&info, TRUE);
  std::vector<uint8_t> cmyk(8 * 4, 100);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = cmyk.data();
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  write_bytes(dir.file("cmyk.jpg"), std::string(reinterpret_cast<const char*>(buffer), size));
  std::free(buffer);
  EXPECT_EQ(message_of<FormatError>([&] { decode_image(dir.file("cmyk.jpg"), kNoLimit); }),
            dir.file("cmyk.jpg") + ": a CMYK JPEG; expected grey or colour (YCbCr) images");

  write_bytes(dir.file("notes.png"), "these are notes, not pixels\n");
  msg = message_of<FormatError>([&] { decode_image(dir.file("notes.png"), kNoLimit); });
  EXPECT_EQ(msg, dir.file("notes.png") + ": not a PNG or JPEG image (its first bytes are neither format's signature)");

  write_bytes(dir.file("empty.jpg"), "");
  msg = message_of<FormatError>([&] { decode_image(dir.file("empty.jpg"), kNoLimit); });
  EXPECT_EQ(msg, dir.file("empty.jpg") + ": not a PNG or JPEG image (the file is empty)");

  EXPECT_TRUE(contains(message_of<IOError>([&] { decode_image(dir.file("missing.png"), kNoLimit); }), "missing.png"));
}

// A PNG whose header claims a million by a million grey pixels (a terabyte), in a few bytes.
std::string huge_png() {
  const auto chunk = [](const std::string& type, const std::string& data) {
    std::string out;
    for (int shift : {24, 16, 8, 0}) out += static_cast<char>((data.size() >> shift) & 0xff);
    const std::string body = type + data;
    out += body;
    const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
    for (int shift : {24, 16, 8, 0}) out += static_cast<char>((crc >> shift) & 0xff);
    return out;
  };
  const std::string side("\x00\x0f\x42\x40", 4);  // 1000000
  const std::string ihdr = side + side + std::string("\x08\x00\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8)) +
         chunk("IEND", "");
}

TEST(ImageFile, AHeaderClaimingMoreThanMemoryIsRefusedBeforeAllocating) {
  TempDir dir;
  write_bytes(dir.file("huge.png"), huge_png());
  const std::string msg = message_of<OutOfMemoryError>([&] { decode_image(dir.file("huge.png"), 1 << 20); });
  EXPECT_TRUE(msg.starts_with(dir.file("huge.png") + ": its 1000000x1000000 pixels would take 1000000000000 bytes "
                              "decoded, more than the ")) << msg;
}

TEST(ImageFile, BilinearResizeMatchesAHandComputedCase) {
  // 2x2 grey [[0, 100], [200, 60]] to 4x4. Output coordinate o samples (o + 0.5) / 2 - 0.5: -0.25
  // (clamped to 0), 0.25, 0.75, 1.25 (its upper neighbour clamped to 1). Row 1, column 1 is
  // (0.25, 0.25): 0.75 * (0.75 * 0 + 0.25 * 100) + 0.25 * (0.75 * 200 + 0.25 * 60) = 60.
  const Image in{.height = 2, .width = 2, .channels = 1, .pixels = {0, 100, 200, 60}};
  const Image out = resize_bilinear(in, 4, 4);
  const std::vector<uint8_t> expected = {0,   25,  75,  100,  //
                                         50,  60,  80,  90,   // 0.75 * row 0 + 0.25 * row 1
                                         150, 130, 90,  70,   // 0.25 * row 0 + 0.75 * row 1
                                         200, 165, 95,  60};
  EXPECT_EQ(out.pixels, expected);
  // Down to 1x1 samples the centre, (0.5, 0.5): the mean of the four.
  EXPECT_EQ(resize_bilinear(in, 1, 1).pixels, std::vector<uint8_t>{90});
  EXPECT_EQ(resize_bilinear(in, 2, 2).pixels, in.pixels);
}

TEST(ImageFile, ChannelConversion) {
  const Image rgb{.height = 1, .width = 2, .channels = 3, .pixels = {255, 0, 0, 10, 200, 30}};
  // (299 * 255 + 500) / 1000 = 76; (299 * 10 + 587 * 200 + 114 * 30 + 500) / 1000 = 124.
  EXPECT_EQ(convert_channels(rgb, 1).pixels, (std::vector<uint8_t>{76, 124}));
  const Image grey{.height = 1, .width = 2, .channels = 1, .pixels = {7, 9}};
  EXPECT_EQ(convert_channels(grey, 3).pixels, (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
}

TEST(ImageFolder, ClassesAreTheSortedSubfoldersAndHiddenOrForeignFilesAreSkipped) {
  TempDir dir;
  const Image image = gradient(4, 4, 1);
  for (const std::string file : {"zebra/2.png", "zebra/1.jpg", "ant/b/deep.PNG", "ant/a.jpeg", "Moth/x.png"}) {
    if (file.ends_with(".png") || file.ends_with(".PNG")) write_png(dir.file(file), image);
    else write_jpeg(dir.file(file), image);
  }
  write_bytes(dir.file("zebra/README.txt"), "notes");
  write_bytes(dir.file("zebra/.DS_Store"), "x");
  write_bytes(dir.file(".hidden/a.png"), "x");
  write_bytes(dir.file("notes.txt"), "x");
  const ImageFolderListing listing = list_image_folder(dir.path());
  EXPECT_EQ(listing.classes, (std::vector<std::string>{"Moth", "ant", "zebra"}));  // byte order, as sorted()
  EXPECT_EQ(listing.files, (std::vector<std::string>{dir.file("Moth/x.png"), dir.file("ant/a.jpeg"),
                                                     dir.file("ant/b/deep.PNG"), dir.file("zebra/1.jpg"),
                                                     dir.file("zebra/2.png")}));
  EXPECT_EQ(listing.labels, (std::vector<int64_t>{0, 1, 1, 2, 2}));
  EXPECT_EQ(listing.skipped, 4);
  // Given a model's classes, a folder's ids are the model's.
  const ImageFolderListing some = list_image_folder(dir.path(), {"Moth", "ant", "bee", "zebra"});
  EXPECT_EQ(some.labels, (std::vector<int64_t>{0, 1, 1, 3, 3}));
  EXPECT_EQ(message_of<ValueError>([&] { list_image_folder(dir.path(), {"ant", "zebra"}); }),
            dir.file("Moth") + ": class 'Moth' is not one of the model's 2 classes");
}

TEST(ImageFolder, BadFoldersAreOneErrorNamingThem) {
  TempDir dir;
  EXPECT_EQ(message_of<IOError>([&] { list_image_folder(dir.file("nothing")); }),
            dir.file("nothing") + ": expected a folder of images, one subfolder per class, found nothing there");
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_EQ(message_of<ValueError>([&] { list_image_folder(dir.file("empty")); }),
            dir.file("empty") + ": found no class folders; expected a subfolder per class, at least two, each "
                                "holding that class's .png or .jpg images");
  write_png(dir.file("one/cat/a.png"), gradient(4, 4, 1));
  EXPECT_EQ(message_of<ValueError>([&] { list_image_folder(dir.file("one")); }),
            dir.file("one") + ": found one class folder ('cat'); expected a subfolder per class, at least two, each "
                              "holding that class's .png or .jpg images");
  write_png(dir.file("two/cat/a.png"), gradient(4, 4, 1));
  write_bytes(dir.file("two/dog/notes.txt"), "x");
  EXPECT_EQ(message_of<ValueError>([&] { list_image_folder(dir.file("two")); }),
            dir.file("two/dog") + ": class 'dog' holds no .png, .jpg or .jpeg image");
}

TEST(ImageFolder, ReadImagesDecidesSizeAndChannelsAndRefusesMixedSizes) {
  TempDir dir;
  write_png(dir.file("a.png"), gradient(4, 6, 1));
  write_png(dir.file("b.png"), gradient(4, 6, 3));
  ImageFormat format;
  const Tensor images = read_images({dir.file("a.png"), dir.file("b.png")}, format);
  EXPECT_EQ(format.channels, 3);  // one image in colour: all in colour
  EXPECT_EQ(images.shape(), (Shape{2, 3, 4, 6}));
  // Planes [C, H, W] from the file's [H, W, C]: channel 2 of b's pixel (1, 2) is (16 + 10 + 80).
  EXPECT_EQ(images.to_vector<uint8_t>()[static_cast<size_t>(((1 * 3 + 2) * 4 + 1) * 6 + 2)], 106);
  // The grey image repeated into three channels.
  EXPECT_EQ(images.to_vector<uint8_t>()[static_cast<size_t>((2 * 4 + 1) * 6 + 2)], 16 + 10);

  write_png(dir.file("c.png"), gradient(5, 6, 1));
  ImageFormat unset;
  EXPECT_EQ(message_of<ValueError>([&] { read_images({dir.file("a.png"), dir.file("c.png")}, unset); }),
            dir.file("c.png") + ": 6x5 pixels, but " + dir.file("a.png") +
                " is 6x4; give --image-size HxW to resize every image to one size");
  ImageFormat resized{.channels = 1, .height = 3, .width = 3};
  EXPECT_EQ(read_images({dir.file("a.png"), dir.file("c.png")}, resized).shape(), (Shape{2, 1, 3, 3}));
}

TEST(ImageFolder, NormalisationIsMeasuredPerChannel) {
  // Channel 0: 0 and 255 (mean 0.5, std 0.5); channel 1: constant 51 (mean 0.2, std 1 by rule).
  const Tensor images = Tensor::from_vector<uint8_t>({0, 51, 255, 51}, {2, 2, 1, 1});
  const Normalization n = measure_normalization(images);
  EXPECT_FLOAT_EQ(n.mean[0], 0.5f);
  EXPECT_FLOAT_EQ(n.std[0], 0.5f);
  EXPECT_FLOAT_EQ(n.mean[1], 0.2f);
  EXPECT_FLOAT_EQ(n.std[1], 1.0f);
}

TEST(ImageFolder, TrainAndTestFoldersAreFoundWhenBothArePresent) {
  TempDir dir;
  EXPECT_FALSE(train_test_folders(dir.path()));
  std::filesystem::create_directories(dir.file("train"));
  EXPECT_FALSE(train_test_folders(dir.path()));
  std::filesystem::create_directories(dir.file("val"));
  EXPECT_EQ(train_test_folders(dir.path())->second, dir.file("val"));
  std::filesystem::create_directories(dir.file("test"));
  EXPECT_EQ(train_test_folders(dir.path())->second, dir.file("test"));
}

TEST(Split, PerClassDeterministicBySeedAndProportional) {
  std::vector<int64_t> labels;
  for (int i = 0; i < 30; ++i) labels.push_back(i % 3 == 0 ? 0 : 1);  // 10 of class 0, 20 of class 1
  labels.push_back(2);                                                   // a class of one
  const Split a = split_per_class(labels, 3, 0.1, 7), b = split_per_class(labels, 3, 0.1, 7);
  EXPECT_EQ(a.held_out, b.held_out);
  EXPECT_EQ(a.train, b.train);
  int64_t held[3] = {0, 0, 0};
  for (int64_t i : a.held_out) ++held[labels[static_cast<size_t>(i)]];
  EXPECT_EQ(held[0], 1);
  EXPECT_EQ(held[1], 2);
  EXPECT_EQ(held[2], 0);  // never all of a class
  EXPECT_EQ(a.train.size() + a.held_out.size(), labels.size());
  EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end()));
  bool differs = false;
  for (uint64_t seed = 8; seed < 16 && !differs; ++seed) differs = split_per_class(labels, 3, 0.1, seed).held_out != a.held_out;
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace weft::data
