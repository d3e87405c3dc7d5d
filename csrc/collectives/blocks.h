// Blocks: what one rank of a ring contributes or receives when that is not one
// contiguous chunk of the buffer, but several ranges of it (the hierarchical
// algorithms: a rail's ranks' slots, an uneven split), and the units a block is sent in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pycollect {

// A range of a buffer, in elements.
struct Range {
  size_t offset = 0;
  size_t length = 0;
};
// One rank's part of a ring: ranges of one buffer, in order. Its elements, packed back
// to back in that order, are its "positions" 0 .. length - 1.
using Block = std::vector<Range>;

// A pipelining unit of a block: at most one segment of one range.
struct BlockUnit {
  size_t offset;    // in the buffer
  size_t length;
  size_t position;  // in the block, packed
};

// The units of `b`, ranges cut into segments of at most `per` elements; empty ranges
// have none.
inline std::vector<BlockUnit> unitsOf(const Block& b, size_t per) {
  std::vector<BlockUnit> units;
  size_t position = 0;
  for (const Range& r : b) {
    for (size_t at = 0; at < r.length; at += per) {
      const size_t len = std::min(per, r.length - at);
      units.push_back({r.offset + at, len, position + at});
    }
    position += r.length;
  }
  return units;
}

inline size_t blockLength(const Block& b) {
  size_t n = 0;
  for (const Range& r : b) n += r.length;
  return n;
}

// The slots of `ranks` in a buffer of `count` elements per rank (rank r's slot is
// [r * count, (r + 1) * count)), in the order given.
inline Block slotsOf(const std::vector<int>& ranks, size_t count) {
  Block b;
  for (int r : ranks) b.push_back({static_cast<size_t>(r) * count, count});
  return b;
}

// One block per rank of a ring of `size`: rank r's slot.
inline std::vector<Block> rankSlots(int size, size_t count) {
  std::vector<Block> blocks;
  for (int r = 0; r < size; ++r) blocks.push_back({{static_cast<size_t>(r) * count, count}});
  return blocks;
}

}  // namespace pycollect
