#include "pool/block_plan.hpp"

#include <string>

#include "memwire/error.hpp"
#include "pool/pool_state.hpp"

namespace memwire::detail {
namespace {

std::string range_text(std::uint64_t start, std::uint64_t length) {
  return "[" + std::to_string(start) + ", " + std::to_string(start) + " + " +
         std::to_string(length) + ")";
}

// Where pair `index`'s slice starts in one of its blocks, checked to fit that block: a slice is
// the caller's input, and its sums must not wrap around into another block's bytes.
std::uint64_t slice_start(std::size_t index, const char* side, std::uint64_t block,
                          std::uint64_t block_size, std::uint64_t slice_offset,
                          std::uint64_t pair_offset, std::uint64_t length) {
  std::uint64_t start = 0, end = 0;
  if (__builtin_add_overflow(slice_offset, pair_offset, &start) ||
      __builtin_add_overflow(start, length, &end))
    throw Error(ErrorCode::InvalidArgument,
                "pair " + std::to_string(index) + ": the slice's " + side + " offset " +
                    std::to_string(slice_offset) + " + the pair's " + std::to_string(pair_offset) +
                    " + length " + std::to_string(length) + " overflows");
  if (end > block_size)
    throw Error(ErrorCode::SizeMismatch, "pair " + std::to_string(index) + ": bytes " +
                                             range_text(start, length) + " of " + side + " block " +
                                             std::to_string(block) + " do not fit it (" +
                                             std::to_string(block_size) + " bytes)");
  return start;
}

}  // namespace

TransferRequest plan_blocks(const std::vector<BlockPair>& pairs, const PoolMetadata& remote,
                            const PoolState& local, const std::optional<BlockSlice>& slice) {
  if (slice && slice->length == 0)
    throw Error(ErrorCode::InvalidArgument, "a slice of 0 bytes moves nothing");
  TransferRequest plan;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& pair = pairs[i];
    const auto there = remote.locate(pair.remote);
    const auto here = local.locate(pair.local);
    std::uint64_t remote_start = 0, local_start = 0, length = here.size;
    if (slice) {
      length = slice->length;
      remote_start = slice_start(i, "remote", pair.remote, there.size, slice->remote_offset,
                                 pair.remote_offset, length);
      local_start = slice_start(i, "local", pair.local, here.size, slice->local_offset,
                                pair.local_offset, length);
    } else if (pair.remote_offset != 0 || pair.local_offset != 0) {
      throw Error(ErrorCode::InvalidArgument,
                  "pair " + std::to_string(i) +
                      " names an offset in its blocks: only a sliced transfer (BlockSlice) "
                      "moves part of a block");
    } else if (there.size != here.size) {
      throw Error(ErrorCode::SizeMismatch,
                  "remote block " + std::to_string(pair.remote) + " has " +
                      std::to_string(there.size) + " bytes, local block " +
                      std::to_string(pair.local) + " " + std::to_string(here.size) +
                      " (a BlockSlice moves part of blocks of different sizes)");
    }
    auto* memory =
        static_cast<std::byte*>(local.regions()[here.region].base) + here.offset + local_start;
    const auto remote_offset = there.offset + remote_start;
    plan.bytes += length;
    // Consecutive here and there (whole blocks, or slices that meet), they move as one run.
    if (!plan.segments.empty()) {
      auto& last = plan.segments.back();
      if (last.remote_region == there.region && last.remote_offset + last.length == remote_offset &&
          last.local + last.length == memory && last.local_region == here.region) {
        last.length += length;
        continue;
      }
    }
    plan.segments.push_back({memory, there.region, remote_offset, length, here.region});
  }
  return plan;
}

}  // namespace memwire::detail
