#include "memwire/pool_metadata.hpp"

#include <algorithm>

#include "metadata/json_reader.hpp"

namespace memwire {
namespace {

// `field`: the path in the document ("regions[2].stride").
[[noreturn]] void invalid(std::string field, std::string why) {
  throw MetadataError(detail::kPoolDocument, std::move(field), std::move(why));
}

// The end of a region's last block, or nullopt when it wraps around.
std::optional<std::uint64_t> span_of(const RemoteRegion& region) {
  if (region.count == 0 || region.block_size == 0) return std::nullopt;
  const auto last = region.count - 1;
  if (region.stride != 0 && last > (UINT64_MAX - region.block_size) / region.stride)
    return std::nullopt;
  return last * region.stride + region.block_size;
}

// A request scope's rules, the same for the owner's grant and a peer's parse.
void check_scope(const RequestScope& scope, std::uint64_t block_count) {
  if (scope.request.empty() || scope.request.size() > 160 ||
      scope.request.find('\0') != std::string::npos)
    invalid("request.id", "1 to 160 bytes, no NUL");
  if (scope.access != Access::Read && scope.access != Access::Write &&
      scope.access != Access::ReadWrite)
    invalid("request.access", "read, write or read_write");
  if (scope.runs.empty() || scope.runs.size() > RequestScope::kMaxRuns)
    invalid("request.runs", "1 to " + std::to_string(RequestScope::kMaxRuns) + " runs");
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < scope.runs.size(); ++i) {
    const auto& run = scope.runs[i];
    const auto where = "request.runs[" + std::to_string(i) + "]";
    if (run.count == 0 || run.first > block_count || run.count > block_count - run.first)
      invalid(where, "empty, or past the pool's " + std::to_string(block_count) + " blocks");
    // Sorted and apart: consecutive blocks are one run (one verbs window).
    if (i > 0 && run.first <= next) invalid(where, "unsorted, overlapping or touching");
    next = run.first + run.count;
  }
}

}  // namespace

PoolMetadata PoolMetadata::for_request(std::string token, RequestScope scope) const {
  check_scope(scope, block_count_);
  PoolMetadata granted = *this;
  granted.fields_.token = std::move(token);
  granted.scope_.emplace(std::move(scope));
  return granted;
}

PoolMetadata::PoolMetadata(Fields fields) : fields_(std::move(fields)) {
  auto& regions = fields_.regions;
  if (regions.empty()) invalid("regions", "a pool has at least one region");
  if (regions.size() > kMaxRegions)
    invalid("regions", std::to_string(regions.size()) + " regions (at most " +
                           std::to_string(kMaxRegions) + ")");
  std::uint64_t bytes = 0;
  first_block_.reserve(regions.size());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    auto& region = regions[i];
    const auto where = "regions[" + std::to_string(i) + "]";
    if (region.stride == 0) region.stride = region.block_size;
    if (region.base == 0) invalid(where + ".base", "must not be null");
    if (region.stride < region.block_size)
      invalid(where + ".stride", "smaller than the block size: blocks would overlap");
    const auto span = span_of(region);
    if (!span) invalid(where, "needs blocks of at least one byte, and must not wrap around");
    if (region.base > UINT64_MAX - *span) invalid(where + ".base", "the region wraps around");
    first_block_.push_back(block_count_);
    block_count_ += region.count;
    if (block_count_ > kMaxBlocks)
      invalid("regions", "more than " + std::to_string(kMaxBlocks) + " blocks");
    bytes += region.count * region.block_size;
    if (bytes > kMaxTotalSize || bytes < region.count * region.block_size)  // or wrapped
      invalid("regions", "more than " + std::to_string(kMaxTotalSize) + " bytes of blocks");
  }
  if (fields_.name.size() > 256) invalid("name", "longer than 256 bytes");
}

PoolMetadata::Place PoolMetadata::locate(std::uint64_t block) const {
  if (block >= block_count_)
    throw Error(ErrorCode::InvalidArgument, "block " + std::to_string(block) + " past the pool's " +
                                                std::to_string(block_count_) + " blocks");
  const auto region = static_cast<std::uint32_t>(
      std::upper_bound(first_block_.begin(), first_block_.end(), block) - first_block_.begin() - 1);
  const auto& geometry = fields_.regions[region];
  return {region, (block - first_block_[region]) * geometry.stride, geometry.block_size};
}

}  // namespace memwire
