// Image files written by the encoders of the libraries weft decodes with, for the tests of image
// folders: the pixels going in are known, so what decoding gives back can be compared to them.
#pragma once
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "weft/data/image_file.h"

namespace weft::testing {

// `image` ([H, W, C], C 1 or 3) as an 8-bit PNG at `path`, creating its folder.
inline void write_png(const std::string& path, const data::Image& image) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  ASSERT_TRUE(png_image_write_to_file(&png, path.c_str(), 0, image.pixels.data(), 0, nullptr)) << png.message;
}

// `image` as a baseline JPEG of `quality` (1..100) at `path`.
inline void write_jpeg(const std::string& path, const data::Image& image, int quality = 95) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  jpeg_compress_struct info;
  jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(image.width);
  info.image_height = static_cast<JDIMENSION>(image.height);
  info.input_components = static_cast<int>(image.channels);
  info.in_color_space = image.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.pixels.data() + info.next_scanline * image.width * image.channels);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(buffer), static_cast<std::streamsize>(size));
  std::free(buffer);
}

// An image whose pixels are f(y, x, c).
template <typename F>
data::Image make_image(int64_t height, int64_t width, int64_t channels, F f) {
  data::Image image{.height = height, .width = width, .channels = channels,
                    .pixels = std::vector<uint8_t>(static_cast<size_t>(height * width * channels))};
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t c = 0; c < channels; ++c)
        image.pixels[static_cast<size_t>((y * width + x) * channels + c)] = static_cast<uint8_t>(f(y, x, c));
  return image;
}

// A folder of `per_class` PNGs for each of three classes a model can tell apart at a glance:
// dark, bright on the left, bright on the top, with noise. Class folders DIR/dark, DIR/left, DIR/top.
inline void write_three_class_folder(const std::string& dir, int per_class, int64_t side = 12) {
  uint32_t state = 12345;
  const auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(state >> 27);  // 0..31
  };
  for (int i = 0; i < per_class; ++i) {
    write_png(dir + "/dark/" + std::to_string(i) + ".png", make_image(side, side, 1, [&](int64_t, int64_t, int64_t) {
                return 20 + noise();
              }));
    write_png(dir + "/left/" + std::to_string(i) + ".png", make_image(side, side, 1, [&](int64_t, int64_t x, int64_t) {
                return (x < side / 2 ? 200 : 20) + noise();
              }));
    write_png(dir + "/top/" + std::to_string(i) + ".png", make_image(side, side, 1, [&](int64_t y, int64_t, int64_t) {
                return (y < side / 2 ? 200 : 20) + noise();
              }));
  }
}

}  // namespace weft::testing
