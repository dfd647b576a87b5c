#include "weft/data/image_folder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "weft/data/image_file.h"
#include "weft/io/input_file.h"

namespace weft::data {

namespace {

namespace fs = std::filesystem;

bool hidden(const fs::path& path) { return path.filename().string().starts_with('.'); }

// Sorted, so that the order is the same on every file system.
std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) entries.push_back(it->path());
  WEFT_CHECK(!error, IOError, "cannot list ", dir.string(), ": ", error.message());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The image files below `dir`, in path order; the rest counted in `skipped`.
void collect_images(const fs::path& dir, std::vector<std::string>& files, int64_t& skipped) {
  for (const fs::path& entry : sorted_entries(dir)) {
    if (hidden(entry)) {
      ++skipped;
    } else if (io::is_directory(entry.string())) {
      collect_images(entry, files, skipped);
    } else if (has_image_extension(entry.string())) {
      files.push_back(entry.string());
    } else {
      ++skipped;
    }
  }
}

}  // namespace

ImageFolderListing list_image_folder(const std::string& dir, const std::vector<std::string>& classes) {
  std::error_code error;
  WEFT_CHECK(io::is_directory(dir), IOError, dir, ": expected a folder of images, one subfolder per class, found ",
             fs::exists(dir, error) ? "a file" : "nothing there");
  ImageFolderListing listing;
  listing.classes = classes;
  std::vector<fs::path> class_dirs;
  for (const fs::path& entry : sorted_entries(dir)) {
    if (hidden(entry) || !io::is_directory(entry.string())) {
      ++listing.skipped;
      continue;
    }
    const std::string name = entry.filename().string();
    if (classes.empty()) {
      listing.classes.push_back(name);
    } else {
      WEFT_CHECK(std::find(classes.begin(), classes.end(), name) != classes.end(), ValueError, entry.string(),
                 ": class '", name, "' is not one of the model's ", classes.size(), " classes");
    }
    class_dirs.push_back(entry);
  }
  WEFT_CHECK(!classes.empty() || class_dirs.size() >= 2, ValueError, dir, ": found ",
             class_dirs.empty() ? "no class folders" : str("one class folder ('", listing.classes[0], "')"),
             "; expected a subfolder per class, at least two, each holding that class's .png or .jpg images");
  for (const fs::path& class_dir : class_dirs) {
    const std::string name = class_dir.filename().string();
    const auto id = std::find(listing.classes.begin(), listing.classes.end(), name) - listing.classes.begin();
    const size_t before = listing.files.size();
    collect_images(class_dir, listing.files, listing.skipped);
    WEFT_CHECK(listing.files.size() > before, ValueError, class_dir.string(), ": class '", name,
               "' holds no .png, .jpg or .jpeg image");
    listing.labels.resize(listing.files.size(), id);
  }
  WEFT_CHECK(!listing.files.empty(), ValueError, dir, ": no class folders with images");
  return listing;
}

std::optional<std::pair<std::string, std::string>> train_test_folders(const std::string& dir) {
  const std::string train = (fs::path(dir) / "train").string();
  if (!io::is_directory(train)) return std::nullopt;
  for (const char* held_out : {"test", "val"}) {
    const std::string path = (fs::path(dir) / held_out).string();
    if (io::is_directory(path)) return std::make_pair(train, path);
  }
  return std::nullopt;
}

Tensor read_images(const std::vector<std::string>& files, ImageFormat& format) {
  WEFT_CHECK(format.channels == 0 || format.channels == 1 || format.channels == 3, ValueError,
             "read_images: expected 1 or 3 channels, got ", format.channels);
  WEFT_CHECK((format.height > 0) == (format.width > 0), ValueError, "read_images: expected a height and a width, "
             "or neither, got ", format.height, "x", format.width);
  const uint64_t memory = io::usable_memory_bytes();
  uint64_t used = 0;
  std::vector<Image> images;
  std::string first_color;
  for (const std::string& file : files) {
    Image image = decode_image(file, memory - used);
    if (format.height == 0 && !images.empty() && (image.height != images[0].height || image.width != images[0].width))
      throw ValueError(str(file, ": ", image.width, "x", image.height, " pixels, but ", files[0], " is ",
                           images[0].width, "x", images[0].height, "; give --image-size HxW to resize every image "
                           "to one size"));
    if (format.height > 0) image = resize_bilinear(image, format.height, format.width);
    if (format.channels > 0) image = convert_channels(image, format.channels);
    used += image.pixels.size();
    images.push_back(std::move(image));
  }
  if (format.height == 0 && !images.empty()) {
    format.height = images[0].height;
    format.width = images[0].width;
  }
  if (format.channels == 0)
    format.channels = std::any_of(images.begin(), images.end(), [](const Image& i) { return i.channels == 3; }) ? 3 : 1;
  const int64_t n = static_cast<int64_t>(images.size()), plane = format.height * format.width;
  const uint64_t tensor_bytes = static_cast<uint64_t>(n * format.channels * plane);
  if (used + tensor_bytes > memory)
    throw OutOfMemoryError(str(files.empty() ? "read_images" : files.back(), ": the ", n, " images would take ",
                               tensor_bytes, " bytes as one tensor besides the ", used, " bytes decoded, more than the ",
                               memory, " bytes this process may use"),
                           static_cast<int64_t>(tensor_bytes));
  Tensor out = Tensor::empty({n, format.channels, format.height, format.width}, DType::u8);
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Image image = convert_channels(images[static_cast<size_t>(i)], format.channels);
    // Interleaved [H, W, C] to planes [C, H, W].
    for (int64_t c = 0; c < format.channels; ++c)
      for (int64_t p = 0; p < plane; ++p)
        dst[(i * format.channels + c) * plane + p] = image.pixels[static_cast<size_t>(p * format.channels + c)];
    images[static_cast<size_t>(i)] = Image{};
  }
  return out;
}

Normalization measure_normalization(const Tensor& images) {
  WEFT_CHECK(images.dtype() == DType::u8 && images.dim() == 4, ValueError, "measure_normalization: expected u8 images "
             "[N, C, H, W], found ", images.dtype(), " ", shape_str(images.shape()));
  const Tensor source = images.contiguous_untracked();
  const int64_t n = images.size(0), channels = images.size(1), plane = images.size(2) * images.size(3);
  const uint8_t* pixels = source.data<uint8_t>();
  Normalization normalization;
  for (int64_t c = 0; c < channels; ++c) {
    // Exact integer sums: no rounding however many pixels there are.
    uint64_t sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < plane; ++p) {
        const uint64_t x = pixels[(i * channels + c) * plane + p];
        sum += x;
        squares += x * x;
      }
    const double count = static_cast<double>(n * plane);
    const double mean = static_cast<double>(sum) / count;
    const double variance = std::max(0.0, static_cast<double>(squares) / count - mean * mean);
    const double std = std::sqrt(variance) / 255;
    normalization.mean.push_back(static_cast<float>(mean / 255));
    normalization.std.push_back(std > 0 ? static_cast<float>(std) : 1.0f);
  }
  return normalization;
}

}  // namespace weft::data
