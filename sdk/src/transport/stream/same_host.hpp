#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "transport/stream/frame.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {

class Registration;
class StreamConnection;

// The hook a transport of one host (shm) plugs into the stream protocol: what the frames'
// kCrossMemory and kMapped ask for, which only a peer on the same host can do. The stream sides
// parse and check every frame as for tcp, then call these for the bytes. One call per request,
// none per byte.

// The owner's part on one accepted connection, from a peer process the kernel vouches for.
class SameHostOwner {
 public:
  virtual ~SameHostOwner() = default;
  // A Hello that asks for cross-memory copies, its bytes sent by process `sender` as the kernel
  // recorded it (0: none said; -1: more than one process): it must be the process that
  // connected, and the kernel must let us copy to and from it. Nothing of the peer's memory is
  // touched: a Hello comes before any token, and a peer's memory may stall whoever touches it.
  // Throws the refusal to answer with.
  virtual void check_hello(const FrameHeader& hello, int sender) = 0;
  // Whether the HelloResponse lets the peer read our pools' blocks itself (kDirectReads).
  virtual bool offers_direct_reads() const = 0;
  // A checked request's bytes, copied into the peer's memory at `theirs` (a read) or out of it
  // (a write); throws Error{Transport} when the kernel refuses.
  virtual void copy_to_peer(std::uint64_t theirs, const std::byte* ours, std::size_t length) = 0;
  virtual void copy_from_peer(std::uint64_t theirs, std::byte* ours, std::size_t length) = 0;
  // The same for many blocks: `theirs` and `ours` in the same order, of the same total length.
  virtual void copy_to_peer(std::span<const iovec> theirs, std::span<const iovec> ours) = 0;
  virtual void copy_from_peer(std::span<const iovec> theirs, std::span<const iovec> ours) = 0;
  // Answers a checked request that asked (kMapByDescriptor) with where its bytes `data` lie in
  // one of our SharedBuffers, for the peer to copy through its own mapping; false when they lie
  // in none (or cannot be given): copy as usual.
  virtual bool answer_mapped(StreamConnection& connection, const FrameHeader& request,
                             const std::byte* data) = 0;
  // The same for a checked piece request whose blocks are `memory` (never under a request grant
  // nor for a tagged write: the owner must know their bytes are in before it goes on).
  virtual bool answer_mapped_pieces(StreamConnection& connection, const FrameHeader& request,
                                    const Registration& registration, bool under_request_grant,
                                    std::span<const iovec> memory) = 0;
};

// The peer's part on one dialled connection: copies through its mappings of the owner's
// SharedBuffers where a mapped answer says. `passed`: the descriptor the answer said it carries
// (nullopt: it says none; empty: it never came). Throws Error{Protocol} when the answer does not
// hold up (the connection breaks), another Error when the kernel refuses (the transfer fails).
class SameHostPeer {
 public:
  virtual ~SameHostPeer() = default;
  // `local`: the caller's chunk of `length` bytes, read into or written from.
  virtual void copy_mapped(const SharedLocation& location, std::optional<FileDescriptor> passed,
                           std::byte* local, std::uint64_t length, bool reading) = 0;
  // `blocks`: a piece request's, each at its `offsets` entry in `span`.
  virtual void copy_mapped_pieces(const SharedSpan& span, std::optional<FileDescriptor> passed,
                                  std::span<const iovec> blocks,
                                  std::span<const std::uint64_t> offsets, bool reading) = 0;
};

// What a transport of one host gives its stream transport (StreamSettings::same_host; none for
// tcp): each connection's part.
class SameHost {
 public:
  virtual ~SameHost() = default;
  // For a connection accepted from process `peer_process` (never 0) of user `peer_user`, both
  // as the kernel vouches for them.
  virtual std::unique_ptr<SameHostOwner> owner(int peer_process, uid_t peer_user) = 0;
  virtual std::unique_ptr<SameHostPeer> peer() = 0;
  // Reads `theirs` of process `process` into `ours` (the same total length) on the calling
  // thread, for an owner that lets us (kDirectReads): 0, or the errno of the kernel's refusal.
  virtual int read_directly(int process, std::span<const iovec> theirs,
                            std::span<const iovec> ours) = 0;
};

}  // namespace memwire::detail
