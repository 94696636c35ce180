#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memwire/export.hpp"

namespace memwire {

// What a request grant (Pool::grant) lets its peer do: read, write, or both.
enum class Access : std::uint8_t { Read = 1, Write = 2, ReadWrite = 3 };

// Consecutive blocks of a pool, [first, first + count).
struct MEMWIRE_API BlockRun {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  friend bool operator==(const BlockRun&, const BlockRun&) = default;
};

// The part of a pool one request grant opens to its peer, as its metadata carries it: the
// request's id, the access, and the granted blocks as sorted runs (neither overlapping nor
// touching). The owner refuses anything outside it; the peer checks it first for a clear error.
struct MEMWIRE_API RequestScope {
  static constexpr std::size_t kMaxRuns = 65536;
  std::string request;
  Access access = Access::Write;
  std::vector<BlockRun> runs;
  friend bool operator==(const RequestScope&, const RequestScope&) = default;

  // The runs of `blocks` (any order, duplicates allowed). Throws Error{InvalidArgument} when
  // empty, past `block_count`, or with more than kMaxRuns runs.
  static std::vector<BlockRun> runs_of(std::vector<std::uint64_t> blocks,
                                       std::uint64_t block_count);
  // The index of the run holding blocks [first, first + count), or -1 when no single run does.
  std::int64_t run_holding(std::uint64_t first, std::uint64_t count) const noexcept;
  std::uint64_t block_count() const noexcept;
};

}  // namespace memwire
