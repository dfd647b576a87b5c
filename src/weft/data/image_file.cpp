#include "weft/data/image_file.h"

#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "weft/core/error.h"
#include "weft/io/input_file.h"

namespace weft::data {

namespace {

// Before the allocation that the header's sizes ask for.
void check_fits(const std::string& path, int64_t height, int64_t width, int64_t channels, uint64_t memory_bytes) {
  const uint64_t bytes = static_cast<uint64_t>(height) * static_cast<uint64_t>(width) * static_cast<uint64_t>(channels);
  if (bytes > memory_bytes)
    throw OutOfMemoryError(str(path, ": its ", width, "x", height, " pixels would take ", bytes,
                               " bytes decoded, more than the ", memory_bytes, " bytes left of the memory this "
                               "process may use"),
                           static_cast<int64_t>(std::min<uint64_t>(bytes, INT64_MAX)));
}

Image decode_png(const std::string& path, const std::string& bytes, uint64_t memory_bytes) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  // The simplified API keeps libpng's setjmp / longjmp inside itself and reports by return value.
  struct Release {
    png_image* png;
    ~Release() { png_image_free(png); }
  } release{&png};
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    throw FormatError(str(path, ": not a valid PNG (libpng: ", png.message, ")"));
  Image image{.height = png.height, .width = png.width, .channels = (png.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1, .pixels = {}};
  png.format = image.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  check_fits(path, image.height, image.width, image.channels, memory_bytes);
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr))
    throw FormatError(str(path, ": not a valid PNG (libpng: ", png.message, ")"));
  return image;
}

struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  info->err->format_message(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are corrupt data that libjpeg would paper over (a truncated file is
// completed with grey); the pixels would be wrong, so they fail as errors do. Trace messages
// (levels 0 and up) are ignored.
void jpeg_message(j_common_ptr info, int level) {
  if (level < 0) jpeg_fail(info);
}

enum class JpegOutcome { decoded, failed, too_large, unsupported };

// Only trivially destructible objects live in this frame, so the longjmp from libjpeg's error
// handler skips no destructor; `pixels` lives in the caller's frame and is only resized here.
JpegOutcome read_jpeg(const std::string& bytes, uint64_t memory_bytes, std::vector<uint8_t>& pixels, int64_t& height,
                      int64_t& width, int64_t& channels, JpegErrors& errors) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = jpeg_fail;
  errors.manager.emit_message = jpeg_message;
  jpeg_create_decompress(&info);
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    return JpegOutcome::failed;
  }
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&info, TRUE);
  if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&info);
    return JpegOutcome::unsupported;
  }
  info.out_color_space = info.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  height = info.output_height;
  width = info.output_width;
  channels = info.output_components;
  const uint64_t size = static_cast<uint64_t>(height) * static_cast<uint64_t>(width) * static_cast<uint64_t>(channels);
  if (size > memory_bytes) {
    jpeg_destroy_decompress(&info);
    return JpegOutcome::too_large;
  }
  try {
    pixels.resize(size);
  } catch (const std::bad_alloc&) {
    jpeg_destroy_decompress(&info);
    return JpegOutcome::too_large;
  }
  const size_t row_bytes = static_cast<size_t>(width * channels);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = pixels.data() + info.output_scanline * row_bytes;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return JpegOutcome::decoded;
}

Image decode_jpeg(const std::string& path, const std::string& bytes, uint64_t memory_bytes) {
  Image image;
  JpegErrors errors{};
  switch (read_jpeg(bytes, memory_bytes, image.pixels, image.height, image.width, image.channels, errors)) {
    case JpegOutcome::decoded:
      return image;
    case JpegOutcome::failed:
      throw FormatError(str(path, ": not a valid JPEG (libjpeg: ", errors.message, ")"));
    case JpegOutcome::unsupported:
      throw FormatError(str(path, ": a CMYK JPEG; expected grey or colour (YCbCr) images"));
    case JpegOutcome::too_large:
      break;
  }
  check_fits(path, image.height, image.width, image.channels, memory_bytes);
  throw OutOfMemoryError(str(path, ": its ", image.width, "x", image.height, " pixels could not be allocated"));
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

bool has_image_extension(const std::string& path) {
  const std::string name = lowercase(path);
  for (const char* extension : {".png", ".jpg", ".jpeg"})
    if (name.ends_with(extension)) return true;
  return false;
}

Image decode_image(const std::string& path, uint64_t memory_bytes) {
  const std::string bytes = io::read_input(path, memory_bytes);
  static const std::string kPng("\x89PNG\r\n\x1a\n", 8), kJpeg("\xff\xd8\xff", 3);
  if (bytes.starts_with(kPng)) return decode_png(path, bytes, memory_bytes - bytes.size());
  if (bytes.starts_with(kJpeg)) return decode_jpeg(path, bytes, memory_bytes - bytes.size());
  throw FormatError(str(path, ": not a PNG or JPEG image (", bytes.empty() ? "the file is empty" : "its first bytes "
                        "are neither format's signature", ")"));
}

Image resize_bilinear(const Image& image, int64_t height, int64_t width) {
  WEFT_CHECK(height > 0 && width > 0, ValueError, "resize_bilinear: expected a positive size, got ", height, "x", width);
  if (height == image.height && width == image.width) return image;
  const int64_t channels = image.channels;
  Image out{.height = height, .width = width, .channels = channels,
            .pixels = std::vector<uint8_t>(static_cast<size_t>(height * width * channels))};
  // Each output coordinate's two neighbours in the input and the weight of the second.
  struct Tap {
    int64_t low, high;
    double weight;
  };
  const auto taps = [](int64_t in, int64_t out_size) {
    std::vector<Tap> result;
    const double scale = static_cast<double>(in) / static_cast<double>(out_size);
    for (int64_t o = 0; o < out_size; ++o) {
      const double source = std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5);
      const int64_t low = std::min(static_cast<int64_t>(source), in - 1);
      result.push_back({low, std::min(low + 1, in - 1), source - static_cast<double>(low)});
    }
    return result;
  };
  const std::vector<Tap> rows = taps(image.height, height), columns = taps(image.width, width);
  const auto at = [&](int64_t y, int64_t x, int64_t c) {
    return static_cast<double>(image.pixels[static_cast<size_t>((y * image.width + x) * channels + c)]);
  };
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t c = 0; c < channels; ++c) {
        const Tap& r = rows[static_cast<size_t>(y)];
        const Tap& k = columns[static_cast<size_t>(x)];
        const double top = at(r.low, k.low, c) * (1 - k.weight) + at(r.low, k.high, c) * k.weight;
        const double bottom = at(r.high, k.low, c) * (1 - k.weight) + at(r.high, k.high, c) * k.weight;
        const double value = top * (1 - r.weight) + bottom * r.weight;
        out.pixels[static_cast<size_t>((y * width + x) * channels + c)] =
            static_cast<uint8_t>(std::clamp(std::lround(value), 0L, 255L));
      }
  return out;
}

Image convert_channels(const Image& image, int64_t channels) {
  WEFT_CHECK(channels == 1 || channels == 3, ValueError, "convert_channels: expected 1 or 3 channels, got ", channels);
  if (channels == image.channels) return image;
  const int64_t count = image.height * image.width;
  Image out{.height = image.height, .width = image.width, .channels = channels,
            .pixels = std::vector<uint8_t>(static_cast<size_t>(count * channels))};
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* in = image.pixels.data() + i * image.channels;
    uint8_t* to = out.pixels.data() + i * channels;
    if (channels == 3) to[0] = to[1] = to[2] = in[0];
    else to[0] = static_cast<uint8_t>((299 * in[0] + 587 * in[1] + 114 * in[2] + 500) / 1000);
  }
  return out;
}

}  // namespace weft::data
