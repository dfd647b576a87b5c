// Image files: PNG (libpng) and JPEG (libjpeg-turbo) decoded to 8-bit pixels, and the two
// conversions a data set of them needs, to one size and to one channel count.
//
// Pixels are interleaved rows, [H, W, C] as the files hold them, C 1 (grey) or 3 (RGB).
// decode_image reads the format from the file's first bytes, not its name. It reads PNG's grey
// and colour types, palettes and 16-bit samples as 8-bit grey or RGB (transparency is not kept),
// and baseline and progressive JPEG in grey or YCbCr. A file that is not a PNG or a JPEG, or
// that the decoder rejects (corrupt, truncated: libjpeg's "premature end" warning included, a
// CMYK JPEG), is a FormatError naming the file and the decoder's reason; one that cannot be read
// is io's IOError. The bytes the decoded image would take are checked against `memory_bytes`
// before anything is allocated (OutOfMemoryError naming the file): a header can claim a million
// by a million pixels in a few bytes. Neither decoder's error path leaks or leaves the process:
// libpng's longjmp stays inside its simplified API, libjpeg's inside one C-style frame.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::data {

struct Image {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 or 3
  std::vector<uint8_t> pixels;                  // [height, width, channels]
};

// Whether `path`'s name ends in .png, .jpg or .jpeg (any case): what an image folder reads.
bool has_image_extension(const std::string& path);

Image decode_image(const std::string& path, uint64_t memory_bytes);

// Bilinear resampling to height x width, as torch.nn.functional.interpolate(mode="bilinear",
// align_corners=False, antialias=False) computes it: output pixel (y, x) samples the input at
// ((y + 0.5) * H / height - 0.5, (x + 0.5) * W / width - 0.5), clamped to the edges, and the
// result is rounded to the nearest byte. The same size returns the image unchanged.
Image resize_bilinear(const Image& image, int64_t height, int64_t width);

// To `channels` (1 or 3): grey to RGB repeats the value; RGB to grey is ITU-R 601-2 luma,
// (299 R + 587 G + 114 B) / 1000 rounded to the nearest byte.
Image convert_channels(const Image& image, int64_t channels);

}  // namespace weft::data
