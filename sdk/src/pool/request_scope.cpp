#include "memwire/request_scope.hpp"

#include <algorithm>

#include "memwire/error.hpp"

namespace memwire {

std::vector<BlockRun> RequestScope::runs_of(std::vector<std::uint64_t> blocks,
                                            std::uint64_t block_count) {
  if (blocks.empty()) throw Error(ErrorCode::InvalidArgument, "a grant needs at least one block");
  std::sort(blocks.begin(), blocks.end());
  if (blocks.back() >= block_count)
    throw Error(ErrorCode::InvalidArgument, "block " + std::to_string(blocks.back()) +
                                                " past the pool's " + std::to_string(block_count) +
                                                " blocks");
  std::vector<BlockRun> runs;
  for (const auto block : blocks) {
    if (!runs.empty() && block < runs.back().first + runs.back().count) continue;  // repeated
    if (!runs.empty() && block == runs.back().first + runs.back().count) {
      ++runs.back().count;
      continue;
    }
    if (runs.size() == kMaxRuns)
      throw Error(ErrorCode::InvalidArgument, "a grant of more than " + std::to_string(kMaxRuns) +
                                                  " runs of consecutive blocks");
    runs.push_back({block, 1});
  }
  return runs;
}

std::int64_t RequestScope::run_holding(std::uint64_t first, std::uint64_t count) const noexcept {
  if (count == 0) return -1;
  // The last run that starts at or before `first`.
  auto after =
      std::upper_bound(runs.begin(), runs.end(), first,
                       [](std::uint64_t block, const BlockRun& run) { return block < run.first; });
  if (after == runs.begin()) return -1;
  const auto& run = *(after - 1);
  if (first - run.first >= run.count || count > run.count - (first - run.first)) return -1;
  return after - 1 - runs.begin();
}

std::uint64_t RequestScope::block_count() const noexcept {
  std::uint64_t total = 0;
  for (const auto& run : runs) total += run.count;
  return total;
}

}  // namespace memwire
