#include "weft/data/split.h"

#include <algorithm>
#include <cmath>

#include "weft/core/error.h"
#include "weft/core/random.h"

namespace weft::data {

Split split_per_class(const std::vector<int64_t>& labels, int64_t classes, double fraction, uint64_t seed) {
  WEFT_CHECK(fraction >= 0 && fraction < 1, ValueError, "split_per_class: expected a fraction in [0, 1), got ", fraction);
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(classes));
  for (size_t i = 0; i < labels.size(); ++i) {
    WEFT_CHECK(labels[i] >= 0 && labels[i] < classes, ValueError, "split_per_class: label ", labels[i], " outside 0..",
               classes - 1);
    members[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  }
  Generator generator(seed);
  Split split;
  for (std::vector<int64_t>& samples : members) {
    const int64_t n = static_cast<int64_t>(samples.size());
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(samples[static_cast<size_t>(i)], samples[generator.next_u64() % static_cast<uint64_t>(i + 1)]);
    int64_t held = std::llround(static_cast<double>(n) * fraction);
    if (fraction > 0 && n >= 2) held = std::max<int64_t>(held, 1);
    held = std::min(held, n - 1);
    split.held_out.insert(split.held_out.end(), samples.begin(), samples.begin() + std::max<int64_t>(held, 0));
    split.train.insert(split.train.end(), samples.begin() + std::max<int64_t>(held, 0), samples.end());
  }
  std::sort(split.train.begin(), split.train.end());
  std::sort(split.held_out.begin(), split.held_out.end());
  return split;
}

}  // namespace weft::data
