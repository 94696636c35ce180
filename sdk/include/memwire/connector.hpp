#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/connector_options.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/export.hpp"
#include "memwire/limits.hpp"
#include "memwire/log_level.hpp"
#include "memwire/metadata.hpp"
#include "memwire/operation.hpp"
#include "memwire/pool.hpp"
#include "memwire/telemetry.hpp"

namespace memwire {

// One per worker: owns the transports' endpoints, one listener per transport, the table of
// live passive operations and pooled connections to peers.
//
// fork(): a connector belongs to the process that made it. In a child forked after it was
// made, its methods that move data throw Error{InvalidArgument} (make a new Connector in the
// child: that works), and destroying it leaves the parent's state alone (never joins threads
// that do not exist there). Operations made before the fork are the parent's too.
class MEMWIRE_API Connector {
 public:
  explicit Connector(ConnectorOptions options = {});
  ~Connector();
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  const std::string& name() const noexcept;
  const std::string& hostname() const noexcept;
  // Transports that started on this connector, best first.
  std::vector<std::string> transports() const;
  // The counters so far (see memwire/telemetry.hpp); cheap, safe from any thread.
  TelemetrySnapshot telemetry() const;

  [[nodiscard("dropping it revokes the remote access at once")]] ReadableOperation create_readable(
      std::vector<Descriptor> local);
  [[nodiscard("dropping it revokes the remote access at once")]] WritableOperation create_writable(
      std::vector<Descriptor> local);
  [[nodiscard("dropping it cancels the transfer")]] ReadOperation begin_read(
      const RdmaMetadata& remote, std::vector<Descriptor> local);
  [[nodiscard("dropping it cancels the transfer")]] WriteOperation begin_write(
      std::vector<Descriptor> local, const RdmaMetadata& remote);

  // Pools (memwire/pool.hpp): registered once, then blocks move by index, any number of times.
  // Regions of host memory; throws Error{InvalidArgument} for bad geometry or more than the
  // metadata limits, Error{Transport} when no started transport moves pool blocks.
  Pool register_pool(std::vector<BlockRegion> regions, PoolOptions options = {});
  // Reads remote blocks into local ones (pairs: remote block -> local block), then, when `tag`
  // is not empty, tells the owner `tag` (after every byte is here). Block sizes must match
  // (Error{SizeMismatch}; a BlockSlice moves part of blocks of any sizes, below); indexes past a
  // pool's end are Error{InvalidArgument}; runs of consecutive blocks move as one piece. Tags are
  // at most kMaxTagBytes.
  static constexpr std::size_t kMaxTagBytes = memwire::kMaxTagBytes;  // memwire/limits.hpp
  [[nodiscard("dropping it cancels the transfer")]] BlockTransfer read_blocks(
      const PoolMetadata& remote, const std::vector<BlockPair>& blocks, const Pool& local,
      std::string tag = {});
  // Writes local blocks into remote ones; the owner receives `tag` only once they are in its
  // memory.
  [[nodiscard("dropping it cancels the transfer")]] BlockTransfer write_blocks(
      const Pool& local, const std::vector<BlockPair>& blocks, const PoolMetadata& remote,
      std::string tag = {});
  // The same, moving only `slice` of each pair's blocks (memwire/pool.hpp): pools of different
  // block sizes pair when the slice fits both blocks of every pair. A zero length, or offsets
  // that overflow, are Error{InvalidArgument}; a slice past a block's end is
  // Error{SizeMismatch}, naming the pair and the block. Checked before any byte moves.
  [[nodiscard("dropping it cancels the transfer")]] BlockTransfer read_blocks(
      const PoolMetadata& remote, const std::vector<BlockPair>& blocks, const Pool& local,
      const BlockSlice& slice, std::string tag = {});
  [[nodiscard("dropping it cancels the transfer")]] BlockTransfer write_blocks(
      const Pool& local, const std::vector<BlockPair>& blocks, const PoolMetadata& remote,
      const BlockSlice& slice, std::string tag = {});

  friend bool operator==(const Connector& a, const Connector& b) { return a.name() == b.name(); }

  // Internal (sdk/src/core/connector_impl.hpp): named here so that the library's pool layer can
  // use it; incomplete for everyone else.
  class MEMWIRE_HIDDEN Impl;

 private:
  Impl& usable() const;  // throws in a child forked after this connector was made
  std::unique_ptr<Impl> impl_;
};

}  // namespace memwire
