// A held-out split drawn class by class, so that every class is in both parts in proportion:
// what an image folder or a table without a test set of its own is evaluated on.
//
// Of each class's n samples, round(n * fraction) are held out, at least one when fraction > 0
// and n >= 2, never all n. Which ones is a Fisher-Yates shuffle of the class's samples by a
// Generator seeded with `seed` (core/random.h): the same labels, fraction and seed give the same
// split on every machine. Both lists come back in increasing order.
#pragma once
#include <cstdint>
#include <vector>

namespace weft::data {

struct Split {
  std::vector<int64_t> train, held_out;
};

// labels: class ids in [0, classes); fraction in [0, 1): ValueError otherwise.
Split split_per_class(const std::vector<int64_t>& labels, int64_t classes, double fraction, uint64_t seed);

}  // namespace weft::data
