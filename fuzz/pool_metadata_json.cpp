// PoolMetadata::from_json: a pool's owner hands this to every peer, and a peer's read_blocks and
// write_blocks trust its geometry. Anything but metadata or Error{InvalidMetadata} is a finding;
// so is metadata whose own JSON does not parse back to the same value, metadata past the limits
// the parser promises (regions, blocks, bytes of blocks), and a block that locate() puts outside
// its region, or a block past the last that it does not refuse.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "memwire/error.hpp"
#include "memwire/pool_metadata.hpp"
#include "parse_metadata.hpp"

namespace {

constexpr auto parse = parse_metadata<memwire::PoolMetadata>;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "pool metadata: %s\n", what);
  std::abort();
}

void check_limits(const memwire::PoolMetadata& metadata) {
  using memwire::PoolMetadata;
  const auto& regions = metadata.regions();
  if (regions.empty() || regions.size() > PoolMetadata::kMaxRegions) finding("region count");
  unsigned __int128 blocks = 0;
  unsigned __int128 bytes = 0;  // no wrap-around here, whatever the regions say
  for (const auto& region : regions) {
    if (region.block_size == 0 || region.count == 0 || region.base == 0) finding("empty region");
    if (region.stride < region.block_size) finding("overlapping blocks");
    const unsigned __int128 span =
        static_cast<unsigned __int128>(region.count - 1) * region.stride + region.block_size;
    if (span > UINT64_MAX - region.base) finding("a region wraps around");
    blocks += region.count;
    bytes += static_cast<unsigned __int128>(region.count) * region.block_size;
  }
  if (blocks != static_cast<unsigned __int128>(metadata.block_count()))
    finding("block_count is not the regions' sum");
  if (blocks > PoolMetadata::kMaxBlocks) finding("more blocks than kMaxBlocks");
  if (bytes > PoolMetadata::kMaxTotalSize) finding("more bytes of blocks than kMaxTotalSize");
}

void check_locate(const memwire::PoolMetadata& metadata) {
  const auto count = metadata.block_count();
  for (const std::uint64_t block : {std::uint64_t{0}, count / 2, count - 1}) {
    const auto place = metadata.locate(block);
    if (place.region >= metadata.regions().size()) finding("locate: no such region");
    const auto& region = metadata.regions()[place.region];
    if (place.size != region.block_size) finding("locate: wrong size");
    if (place.offset % region.stride != 0 || place.offset / region.stride >= region.count)
      finding("locate: outside its region");
  }
  try {
    (void)metadata.locate(count);
    finding("locate: a block past the last was not refused");
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::InvalidArgument) finding("locate: wrong error");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const auto metadata = parse(json);
  if (!metadata) return 0;
  check_limits(*metadata);
  check_locate(*metadata);
  const auto again = parse(metadata->to_json());
  if (!again || !(*again == *metadata)) finding("to_json lost or changed something");
  if (again->regions() != metadata->regions()) finding("to_json's region groups differ");
  return 0;
}
