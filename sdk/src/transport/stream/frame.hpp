#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "memwire/error_codes.hpp"
#include "memwire/limits.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

// The stream transports' wire format (TCP, and Unix sockets for shm): a fixed 80-byte header,
// then `length` payload bytes. Requests carry the notification key, the token, the descriptor
// index, offset and length, so the passive side can check every access against its
// registration before touching memory. With kCrossMemory the payload does not travel on the
// socket: the passive side copies it straight between its registration and `peer_address` in
// the active process (process_vm_readv/writev), or (kMapped) the active side maps the passive
// side's SharedBuffer and copies itself.
//
// Many small blocks (a KV cache's) go as one piece request: `index` FramePieces follow the
// header, each (descriptor, offset, length); `length` is the sum of their lengths. A read is
// answered by one ReadResponse carrying the pieces' bytes back to back; a write carries them
// after the piece list. With kCrossMemory each piece names its own `peer_address` and nothing
// but the list travels: one process_vm_readv/writev call with an iovec per piece.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

enum class FrameType : std::uint8_t {
  Hello = 1,                // payload: the dialling connector's name
  ReadRequest = 2,          // no payload; `length` bytes wanted at (index, offset)
  ReadResponse = 3,         // payload: the bytes, or the error text when code != 0
  WriteRequest = 4,         // payload: the bytes for (index, offset)
  WriteResponse = 5,        // payload: error text when code != 0
  Notice = 6,               // completion (code 0) or failure notice; payload: error text
  NoticeResponse = 7,       // payload: error text when code != 0
  HelloResponse = 8,        // answers a cross-memory Hello; payload: error text when code != 0
  ReadPiecesRequest = 9,    // payload: the piece list; answered by one ReadResponse
  WritePiecesRequest = 10,  // payload: the piece list, then the pieces' bytes (not kCrossMemory)
  // A transfer between pools has frames of its own, read through PoolFrameHeader (PROTOCOL.md).
  PoolReadRequest = 11,   // payload: the piece list, the tag; answered by one ReadResponse
  PoolWriteRequest = 12,  // payload: the piece list, the tag, the bytes; answered by WriteResponse
  PoolEnd = 13,  // the transfer's last step: code 0 delivers its tag, else it failed (payload:
                 // error text); answered by NoticeResponse
};
// The last type above: a frame of a later one is refused as unknown. Kept next to the list.
inline constexpr FrameType kLastFrameType = FrameType::PoolEnd;

namespace frame_flags {
inline constexpr std::uint8_t kCrossMemory = 1;
// The request is the whole transfer: serving it completes the operation, no notice follows.
inline constexpr std::uint8_t kCompletes = 2;
// Cross-memory request: "if that memory is in one of your SharedBuffers, tell me where instead
// of copying". The answer then carries a SharedLocation as payload (a piece request's: a
// SharedSpan, then each piece's offset in it, a u64 each), and with kDescriptor the buffer's
// memfd; the active side copies through its own mapping, and a one-shot operation's completion
// notice always follows. Pool requests may
// ask too (PROTOCOL.md says when the owner answers so).
inline constexpr std::uint8_t kMapped = 4;
// A pool write request that is its transfer's last: the owner delivers the transfer's tag once
// its bytes landed, before it answers, and no PoolEnd follows.
inline constexpr std::uint8_t kLastOfTransfer = 2;
// A cross-memory piece request (pool or one-shot) whose pieces name the peer's GPU memory: after
// the piece list (and a pool request's tag) come `ipc_allocations` FrameIpcAllocations, each
// piece's `reserved` names one, and the owner copies through the opened allocation (CUDA IPC).
// Only in frames of version kCudaIpcVersion.
inline constexpr std::uint8_t kCudaIpc = 8;
// Cross-memory request: kMapped's question, from a peer that takes the SharedBuffer's memfd
// over the socket. Asked instead of kMapped, which an owner no longer answers: a peer that
// predates it would open /proc/<owner>/fd/<n> for a number the owner names, and an owner that
// predates it answers so (the peer would refuse it); either way, the owner copies.
inline constexpr std::uint8_t kMapByDescriptor = 16;
// On a mapped answer (same bit): it carries the memfd of the SharedBuffer it names
// (SCM_RIGHTS, with the frame's first byte), sent once per buffer and access on a connection;
// later answers name the buffer only.
inline constexpr std::uint8_t kDescriptor = 16;
// On a HelloResponse that accepted a cross-memory Hello: the owner lets this peer read its
// pools' blocks itself (process_vm_readv; ShmOptions::direct_reads, a peer of its own user).
// A peer that predates it ignores it and asks as before.
inline constexpr std::uint8_t kDirectReads = 32;
}  // namespace frame_flags

// The frame version of piece requests that carry kCudaIpc: a build that predates it refuses the
// frame by its version ("frame version 2") instead of misreading its payload.
inline constexpr std::uint8_t kCudaIpcVersion = 2;

// A tag is at most this long on the wire, as in the API.
inline constexpr std::uint64_t kMaxFrameTag = memwire::kMaxTagBytes;

struct FrameHeader {
  static constexpr std::uint32_t kMagic = 0x5257'4d4d;  // "MMWR"
  static constexpr std::uint8_t kVersion = 1;
  static constexpr std::uint64_t kMaxText = 4096;  // names and error texts

  std::uint32_t magic = kMagic;
  std::uint8_t version = kVersion;
  FrameType type{};
  std::uint8_t code = 0;  // 0 = ok, else ErrorCode + 1
  std::uint8_t flags = 0;
  std::uint32_t index = 0;
  std::uint32_t ipc_allocations = 0;  // kCudaIpc piece requests: FrameIpcAllocations after the list
  std::uint64_t request_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t peer_address = 0;  // kCrossMemory: the active side's memory for this request
  Id128 key{};
  Id128 token{};
};
static_assert(sizeof(FrameHeader) == 80);

// The same 80 bytes, as the pool frames (PoolReadRequest, PoolWriteRequest, PoolEnd) name them:
// each field means one thing. Read with as_pool() / written with as_frame().
struct PoolFrameHeader {
  std::uint32_t magic = FrameHeader::kMagic;
  std::uint8_t version = FrameHeader::kVersion;
  FrameType type{};
  std::uint8_t code = 0;          // PoolEnd: 0 = done, else ErrorCode + 1
  std::uint8_t flags = 0;         // kCrossMemory, kLastOfTransfer
  std::uint32_t piece_count = 0;  // requests: FramePieces after the header
  std::uint32_t generation = 0;   // low 32 bits of the pool metadata's generation
  std::uint64_t request_id = 0;
  std::uint64_t transfer = 0;         // the transfer's number on its connection
  std::uint64_t length = 0;           // requests: the pieces' bytes; PoolEnd: its error text
  std::uint32_t tag_bytes = 0;        // requests: the tag after the piece list (0: untagged)
  std::uint32_t ipc_allocations = 0;  // kCudaIpc requests: FrameIpcAllocations after the tag
  Id128 key{};
  Id128 token{};
};
static_assert(sizeof(PoolFrameHeader) == sizeof(FrameHeader));
inline PoolFrameHeader as_pool(const FrameHeader& header) {
  return std::bit_cast<PoolFrameHeader>(header);
}
inline FrameHeader as_frame(const PoolFrameHeader& header) {
  return std::bit_cast<FrameHeader>(header);
}
inline bool is_pool_request(FrameType type) {
  return type == FrameType::PoolReadRequest || type == FrameType::PoolWriteRequest;
}
// A piece request whose bytes go to the passive side.
inline bool is_write_request(FrameType type) {
  return type == FrameType::WritePiecesRequest || type == FrameType::PoolWriteRequest;
}

// One block of a piece request: `length` bytes at `offset` in descriptor `index` of the
// registration; with kCrossMemory, `peer_address` is the block's place in the active process.
struct FramePiece {
  std::uint32_t index = 0;
  std::uint32_t reserved = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t peer_address = 0;
};
static_assert(sizeof(FramePiece) == 32);

// One of the peer's GPU allocations that a kCudaIpc request's pieces lie in: its IPC handle
// (cuIpcGetMemHandle), and where and how large the peer says it is. The owner believes none of
// it: the handle must open, the opened allocation must have this size, and every piece must lie
// inside [base, base + size).
struct FrameIpcAllocation {
  unsigned char handle[64] = {};
  std::uint64_t base = 0;
  std::uint64_t size = 0;
};
static_assert(sizeof(FrameIpcAllocation) == 80);

// Pieces per request, at most: IOV_MAX, so that one readv/writev or process_vm_readv/writev
// call moves a whole request, and a hostile count costs the passive side at most 32 KiB.
inline constexpr std::uint32_t kMaxFramePieces = 1024;

inline bool is_piece_request(FrameType type) {
  return type == FrameType::ReadPiecesRequest || type == FrameType::WritePiecesRequest ||
         is_pool_request(type);
}
// The piece list's size on the wire; 0 when the count is out of range (the frame is malformed).
inline std::uint64_t piece_list_bytes(const FrameHeader& header) {
  if (header.index == 0 || header.index > kMaxFramePieces) return 0;
  return std::uint64_t{header.index} * sizeof(FramePiece);
}
// The bytes gathered before a piece request is handled: its list, and a pool request's tag. 0
// when either is out of range.
inline std::uint64_t piece_request_inline_bytes(const FrameHeader& header) {
  const auto list = piece_list_bytes(header);
  if (list == 0) return 0;
  const bool pool_frame = is_pool_request(header.type);
  const auto pool = as_pool(header);
  if (pool_frame && pool.tag_bytes > kMaxFrameTag) return 0;
  const std::uint64_t tag = pool_frame ? pool.tag_bytes : 0;
  if ((header.flags & frame_flags::kCudaIpc) == 0) return list + tag;
  // At most one allocation per piece: a hostile count costs the owner at most 80 KiB.
  const auto entries = pool_frame ? pool.ipc_allocations : header.ipc_allocations;
  if (entries == 0 || entries > header.index) return 0;
  return list + tag + std::uint64_t{entries} * sizeof(FrameIpcAllocation);
}
// Whether the pieces' lengths add up to the header's `length` (and no sum wraps around).
inline bool pieces_add_up(const FrameHeader& header, std::span<const FramePiece> pieces) {
  std::uint64_t total = 0;
  for (const auto& piece : pieces) {
    if (piece.length > header.length - total) return false;
    total += piece.length;
  }
  return total == header.length;
}

// A mapped answer's payload (kMapped), which the owner's same-host part writes and the peer's
// reads (transport/shm). SharedLocation: where a range of the owner's memory lives inside one of
// its SharedBuffers. `buffer` is a number the owner gave the buffer (never reused while it runs),
// not a descriptor or a path: a peer never opens anything the owner names; the buffer's memfd
// itself travels over the Unix socket (SCM_RIGHTS), once per buffer and access on a connection
// (PROTOCOL.md, "Mapped").
struct SharedLocation {
  std::uint64_t buffer = 0;
  std::uint64_t file_size = 0;  // the memfd's size: the peer checks the one it holds is that
  std::uint64_t offset = 0;     // of the range, in the file
  std::uint64_t length = 0;     // of the range
};
static_assert(sizeof(SharedLocation) == 32, "on the wire: a mapped answer to one range");

// The part of a SharedBuffer's file that a peer maps: [offset, offset + length), `offset` a
// whole number of pages. A one-shot answer's is the whole file; a pool's, the run of its blocks
// the request's lie in. What the peer maps; it holds the whole buffer's memfd.
struct SharedSpan {
  std::uint64_t buffer = 0;
  std::uint64_t file_size = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(SharedSpan) == 32, "on the wire, at the head of a mapped piece answer");

// The most a mapped answer to a piece request holds: a SharedSpan, and a u64 per piece.
inline constexpr std::uint64_t kMostMappedPiecesAnswer =
    sizeof(SharedSpan) + 8 * std::uint64_t{kMaxFramePieces};

// The most inline payload a frame other than a piece request may claim and still be gathered
// before it is handled: a text, or a mapped piece answer's locations. One that claims more is
// not waited for: its handler refuses it.
inline std::uint64_t most_gathered_bytes(const FrameHeader& header) {
  const bool mapped =
      header.code == 0 && (header.flags & frame_flags::kMapped) != 0 &&
      (header.type == FrameType::ReadResponse || header.type == FrameType::WriteResponse);
  return mapped ? kMostMappedPiecesAnswer : FrameHeader::kMaxText;
}

// Of a frame's payload, the bytes its receiver needs before it can handle the frame at all (a
// text, a piece list, a mapped location): they are gathered first. The rest (a write's bytes,
// a read answer's) streams from the socket into memory as it arrives.
inline std::uint64_t inline_payload_bytes(const FrameHeader& header) {
  switch (header.type) {
    case FrameType::ReadRequest:
    case FrameType::WriteRequest:
      return 0;
    case FrameType::ReadPiecesRequest:
    case FrameType::WritePiecesRequest:
    case FrameType::PoolReadRequest:
    case FrameType::PoolWriteRequest:
      return piece_request_inline_bytes(header);
    case FrameType::ReadResponse:
      return header.code != 0 || (header.flags & frame_flags::kMapped) != 0 ? header.length : 0;
    default:  // texts, or a write answer's mapped location
      return header.length;
  }
}

// Why 80 received bytes cannot be the header of a frame this build reads: another protocol
// (magic), another version, or a type no side knows. nullopt when they can; the connection that
// received them closes with this reason. Whether the type suits the receiving side, and the
// payload's bounds, are the side's to check.
std::optional<std::string> frame_header_problem(const FrameHeader& header);

// Why a text payload (names, error texts) of `length` bytes is refused, or nullopt.
std::optional<std::string> text_payload_problem(std::uint64_t length);

}  // namespace memwire::detail
