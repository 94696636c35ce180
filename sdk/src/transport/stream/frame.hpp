#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "ids.hpp"
#include "memwire/error_codes.hpp"
#include "memwire/export.hpp"  // MEMWIRE_API: exported for tests, fuzzers and bench

namespace memwire::detail {

// The stream transports' wire format (TCP, and Unix sockets for shm): a fixed 80-byte header,
// then `length` payload bytes. Requests carry the notification key, the token, the descriptor
// index, offset and length, so the passive side can check every access against its
// registration before touching memory. With kCrossMemory the payload does not travel on the
// socket: the passive side copies it straight between its registration and `peer_address` in
// the active process (process_vm_readv/writev), or (kMapped) the active side maps the passive
// side's SharedBuffer and copies itself.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

enum class FrameType : std::uint8_t {
  Hello = 1,           // payload: the dialling connector's name
  ReadRequest = 2,     // no payload; `length` bytes wanted at (index, offset)
  ReadResponse = 3,    // payload: the bytes, or the error text when code != 0
  WriteRequest = 4,    // payload: the bytes for (index, offset)
  WriteResponse = 5,   // payload: error text when code != 0
  Notice = 6,          // completion (code 0) or failure notice; payload: error text
  NoticeResponse = 7,  // payload: error text when code != 0
  HelloResponse = 8,   // answers a cross-memory Hello; payload: error text when code != 0
};

namespace frame_flags {
inline constexpr std::uint8_t kCrossMemory = 1;
// The request is the whole transfer: serving it completes the operation, no notice follows.
inline constexpr std::uint8_t kCompletes = 2;
// Cross-memory request: "if that memory is in one of your SharedBuffers, tell me where instead
// of copying". The answer then carries a SharedLocation as payload, the active side copies
// through its own mapping, and a completion notice always follows.
inline constexpr std::uint8_t kMapped = 4;
}  // namespace frame_flags

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
  std::uint32_t reserved2 = 0;
  std::uint64_t request_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t peer_address = 0;  // kCrossMemory: the active side's memory for this request
  Id128 key{};
  Id128 token{};
};
static_assert(sizeof(FrameHeader) == 80);

// Why 80 received bytes cannot be the header of a frame this build reads: another protocol
// (magic), another version, or a type no side knows. nullopt when they can; the connection that
// received them closes with this reason. Whether the type suits the receiving side, and the
// payload's bounds, are the side's to check.
MEMWIRE_API std::optional<std::string> frame_header_problem(const FrameHeader& header);

// Why a text payload (names, error texts) of `length` bytes is refused, or nullopt.
MEMWIRE_API std::optional<std::string> text_payload_problem(std::uint64_t length);

}  // namespace memwire::detail
