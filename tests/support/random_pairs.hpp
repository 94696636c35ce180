#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "memwire/pool.hpp"

namespace memwire::test_support {

// `count` pairs of distinct blocks of two pools of `blocks` blocks each, in random order on both
// sides (the same for the same seed): scattered blocks, as a KV cache moves them.
inline std::vector<BlockPair> random_pairs(std::uint64_t blocks, std::size_t count,
                                           std::uint64_t seed) {
  std::vector<std::uint64_t> remote(blocks), local(blocks);
  for (std::uint64_t i = 0; i < blocks; ++i) remote[i] = local[i] = i;
  std::mt19937_64 random(seed);
  std::shuffle(remote.begin(), remote.end(), random);
  std::shuffle(local.begin(), local.end(), random);
  std::vector<BlockPair> pairs;
  for (std::size_t i = 0; i < count; ++i) pairs.push_back({remote[i], local[i]});
  return pairs;
}

}  // namespace memwire::test_support
