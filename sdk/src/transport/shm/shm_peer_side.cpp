// The peer's side of shm on one dialled connection: a mapped answer says where in the owner's
// SharedBuffer the bytes lie, and we copy them through our own mapping of it (PeerMappings),
// with non-temporal stores and on two CPUs when large (bulk_copy).
#include "memwire/error.hpp"
#include "transport/shm/bulk_copy.hpp"
#include "transport/shm/peer_mappings.hpp"
#include "transport/shm/shm_sides.hpp"

namespace memwire::detail {
namespace {

class ShmPeerSide final : public SameHostPeer {
 public:
  void copy_mapped(const SharedLocation& location, std::optional<FileDescriptor> passed,
                   std::byte* local, std::uint64_t length, bool reading) override {
    if (location.length != length)
      throw Error(ErrorCode::Protocol, "mapped answer for another length than asked");
    adopt(passed, location.buffer, location.file_size, !reading);
    auto mapping = mappings_.map(location, /*writable=*/!reading);
    if (location.offset > mapping->size() || length > mapping->size() - location.offset)
      throw Error(ErrorCode::Protocol, "mapped answer points outside the peer's buffer");
    auto* remote = mapping->base() + location.offset;
    // Still pinned: a cancel waits for this copy to end before the caller reuses the buffer.
    if (reading) {
      copy_bulk_split(local, remote, length);
    } else {
      copy_bulk_split(remote, local, length);
    }
  }

  void copy_mapped_pieces(const SharedSpan& span, std::optional<FileDescriptor> passed,
                          std::span<const iovec> blocks, std::span<const std::uint64_t> offsets,
                          bool reading) override {
    adopt(passed, span.buffer, span.file_size, !reading);
    auto mapping = mappings_.map(span, /*writable=*/!reading);
    // Every block is checked before any is copied: a bad answer touches nothing.
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (offsets[i] > mapping->size() || blocks[i].iov_len > mapping->size() - offsets[i])
        throw Error(ErrorCode::Protocol, "mapped answer points outside the span it maps");
    // Still pinned: a cancel waits for these copies to end before the caller reuses the blocks.
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto* remote = mapping->base() + offsets[i];
      auto* local = static_cast<std::byte*>(blocks[i].iov_base);
      if (reading) {
        copy_bulk(local, remote, blocks[i].iov_len);
      } else {
        copy_bulk(remote, local, blocks[i].iov_len);
      }
    }
  }

 private:
  // Checks and keeps a descriptor an answer carried; throws Error{Protocol} when it does not
  // hold up.
  void adopt(std::optional<FileDescriptor>& passed, std::uint64_t buffer, std::uint64_t file_size,
             bool writable) {
    if (!passed) return;
    if (!*passed)
      throw Error(ErrorCode::Protocol, "a mapped answer without the descriptor it says it carries");
    mappings_.adopt(buffer, file_size, writable, std::move(*passed));
  }

  PeerMappings mappings_;  // the connection's reader thread only: the buffers the owner gave us
};

}  // namespace

std::unique_ptr<SameHostPeer> make_shm_peer_side() { return std::make_unique<ShmPeerSide>(); }

}  // namespace memwire::detail
