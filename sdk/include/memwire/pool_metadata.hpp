#pragma once

// The pool's metadata floor: what a pool's owner hands its peers (and a sideband carries), apart
// from the pool API (memwire/pool.hpp) that registers pools and moves their blocks.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/device.hpp"
#include "memwire/export.hpp"
#include "memwire/metadata.hpp"
#include "memwire/request_scope.hpp"

namespace memwire {

// One region as its owner describes it to peers.
struct MEMWIRE_API RemoteRegion {
  Device device;
  std::uint64_t base = 0;
  std::uint64_t block_size = 0;
  std::uint64_t stride = 0;
  std::uint64_t count = 0;
  friend bool operator==(const RemoteRegion&, const RemoteRegion&) = default;
};

// What a pool's owner hands out once per peer: regions with their block geometry, not one
// entry per block (an 80 x 2 x 2,000-block KV pool in a few hundred bytes), the endpoint, the
// token, and a generation. Metadata of a dropped or re-registered pool (or of an owner that
// restarted) is refused by the owner with Error{Expired}: it never moves bytes.
class MEMWIRE_API PoolMetadata {
 public:
  static constexpr int kVersion = 1;
  // The limits register_pool and from_json both apply. 4,096 regions of any geometry stay under
  // kMaxJsonBytes (about 140 bytes each at most); a KV cache has one per layer and K/V.
  static constexpr std::size_t kMaxRegions = 4096;
  static constexpr std::uint64_t kMaxBlocks = std::uint64_t(1) << 32;
  static constexpr std::uint64_t kMaxTotalSize = RdmaMetadata::kMaxTotalSize;
  static constexpr std::size_t kMaxJsonBytes = 1 << 20;

  // What the metadata says, by name: PoolMetadata({.name = ..., .generation = ..., ...}).
  struct Fields {
    std::string name;
    std::uint64_t generation = 0;
    std::vector<RemoteRegion> regions;
    std::string key;
    Endpoint endpoint;
    std::string token;
  };
  // Applies the limits above (register_pool and from_json alike): throws MetadataError naming
  // the field ("regions[2].stride"). A region's stride of 0 becomes its block size.
  explicit PoolMetadata(Fields fields);

  // Strict: unknown or missing fields, wrong types, limits, empty regions or a newer version
  // throw MetadataError naming the field (docs/PROTOCOL.md).
  static PoolMetadata from_json(std::string_view json);
  std::string to_json() const;

  // All of it but the scope, to build another that differs in a field.
  const Fields& fields() const noexcept { return fields_; }
  const std::string& name() const noexcept { return fields_.name; }
  std::uint64_t generation() const noexcept { return fields_.generation; }
  const std::vector<RemoteRegion>& regions() const noexcept { return fields_.regions; }
  const std::string& key() const noexcept { return fields_.key; }
  const Endpoint& endpoint() const noexcept { return fields_.endpoint; }
  const std::string& token() const noexcept { return fields_.token; }
  std::uint64_t block_count() const noexcept { return block_count_; }
  // Set in a request grant's metadata (Pool::grant): the request and the blocks it may reach.
  const RequestScope* scope() const noexcept { return scope_ ? &*scope_ : nullptr; }
  // This metadata with another token and a request's scope: what Pool::grant hands out.
  // Throws Error{InvalidMetadata} for runs that are unsorted, touch, overlap or pass the
  // last block, or a request id that is empty, longer than 160 bytes or holds a NUL.
  PoolMetadata for_request(std::string token, RequestScope scope) const;
  // (region, offset in it, size) of a block; throws InvalidArgument past the last block.
  struct Place {
    std::uint32_t region;
    std::uint64_t offset;
    std::uint64_t size;
  };
  Place locate(std::uint64_t block) const;

  friend bool operator==(const PoolMetadata& a, const PoolMetadata& b) {
    return a.to_json() == b.to_json();
  }

 private:
  Fields fields_;
  std::vector<std::uint64_t> first_block_;  // of each region
  std::uint64_t block_count_ = 0;
  std::optional<RequestScope> scope_;
};

}  // namespace memwire
