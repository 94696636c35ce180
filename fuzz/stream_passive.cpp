// The stream transports' passive side: what a peer sends to a connector that serves a readable,
// a writable and a pool (TCP here; shm's Unix socket carries the same frames). Input: the bytes a
// peer sends on one fresh connection. So that the fuzzer gets past the access check, a frame
// header whose key is all zero gets the readable's key, one whose key is 0...01 the writable's,
// one whose key is 0...02 the pool's, and a token of all zero the token of what its key names;
// a pool frame (PoolReadRequest, PoolWriteRequest, PoolEnd) whose generation is zero gets the
// live pool's. Pool frames (tagged or not) thus reach the pool as well as the one-shot
// operations. Every answer must come, and the connection must close once the peer has
// half-closed: the passive side may refuse, never hang. Afterwards the pool's notifications are
// taken (whatever the frames made of them, taking them must work).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loopback.hpp"
#include "memwire/connector.hpp"
#include "memwire/error.hpp"
#include "memwire/pool.hpp"
#include "transport/stream/frame.hpp"
#include "util/ids.hpp"

namespace {

using memwire::Id128;
using memwire::detail::FrameHeader;
using memwire::detail::FrameType;
namespace frame_flags = memwire::detail::frame_flags;

struct Served {
  Id128 key{};
  Id128 token{};
};

Served served_by(const memwire::RdmaMetadata& metadata) {
  auto key = memwire::parse_id(metadata.notification_key());
  auto token = memwire::parse_id(metadata.token());
  if (!key || !token) std::abort();
  return {*key, *token};
}

Served served_by(const memwire::PoolMetadata& metadata) {
  auto key = memwire::parse_id(metadata.key());
  auto token = memwire::parse_id(metadata.token());
  if (!key || !token) std::abort();
  return {*key, *token};
}

std::uint16_t tcp_port(const memwire::RdmaMetadata& metadata) {
  for (const auto& offer : metadata.endpoint().transports)
    if (offer.name == "tcp")
      return static_cast<std::uint16_t>(
          std::stoul(offer.address.substr(offer.address.rfind(':') + 1)));
  std::abort();
}

// Patches keys and tokens frame by frame, skipping the payload a frame of that type carries.
std::string with_live_ids(const std::uint8_t* data, std::size_t size, const Served& readable,
                          const Served& writable, const Served& pool,
                          std::uint32_t pool_generation) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  static constexpr Id128 kZero{};
  static constexpr Id128 kOne{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr Id128 kTwo{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  std::size_t at = 0;
  while (bytes.size() - at >= sizeof(FrameHeader)) {
    FrameHeader header;
    std::memcpy(&header, bytes.data() + at, sizeof header);
    const Served* live = header.key == kOne ? &writable : header.key == kTwo ? &pool : &readable;
    if (header.key == kZero || header.key == kOne || header.key == kTwo) header.key = live->key;
    if (header.token == kZero) header.token = live->token;
    const bool pool_frame = is_pool_request(header.type) || header.type == FrameType::PoolEnd;
    if (pool_frame && as_pool(header).generation == 0) {
      auto pool_header = as_pool(header);
      pool_header.generation = pool_generation;
      header = as_frame(pool_header);
    }
    std::memcpy(bytes.data() + at, &header, sizeof header);
    at += sizeof header;
    const bool carries =
        header.type == FrameType::Hello || header.type == FrameType::Notice ||
        header.type == FrameType::PoolEnd ||
        (header.type == FrameType::WriteRequest && (header.flags & frame_flags::kCrossMemory) == 0);
    if (carries) at += std::min<std::uint64_t>(header.length, bytes.size() - at);
    if (memwire::detail::is_piece_request(header.type)) {  // the piece list, then a write's bytes
      std::uint64_t skip = memwire::detail::piece_request_inline_bytes(header);
      if (is_write_request(header.type) && (header.flags & frame_flags::kCrossMemory) == 0)
        skip += header.length;
      at += std::min<std::uint64_t>(skip, bytes.size() - at);
    }
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static memwire::Connector connector([] {
    memwire::ConnectorOptions options;
    options.name = "fuzz-passive";
    options.transports = {"tcp"};
    options.connect_timeout = std::chrono::seconds(2);
    return options;
  }());
  // Two descriptors each, so that indexes and offsets have somewhere to go wrong.
  std::vector<std::byte> source(4096 + 64), target(4096 + 64);
  auto readable = connector.create_readable(
      {memwire::Descriptor(source.data(), 4096), memwire::Descriptor(source.data() + 4096, 64)});
  auto writable = connector.create_writable(
      {memwire::Descriptor(target.data(), 4096), memwire::Descriptor(target.data() + 4096, 64)});
  // A pool of two regions: 8 blocks of 512 back to back, and 4 blocks of 256 spaced 512 apart.
  std::vector<std::byte> packed(8 * 512), spaced(4 * 512);
  auto pool = connector.register_pool(
      {{packed.data(), 512, 0, 8, {}}, {spaced.data(), 256, 512, 4, {}}}, [] {
        memwire::PoolOptions options;
        options.name = "fuzz";
        options.max_queued_notifications = 4;
        return options;
      }());
  const auto pool_metadata = pool.metadata();
  const auto metadata = readable.metadata();
  const auto bytes = with_live_ids(data, size, served_by(metadata), served_by(writable.metadata()),
                                   served_by(pool_metadata),
                                   static_cast<std::uint32_t>(pool_metadata.generation()));

  const int fd = memwire::fuzz::connect_loopback(tcp_port(metadata));
  memwire::fuzz::send_then_half_close(fd, bytes);
  if (!memwire::fuzz::drain_until_closed(fd)) {
    std::fprintf(stderr, "the passive side kept the connection open after the peer's end\n");
    std::abort();
  }
  ::close(fd);
  // Tags and failures the frames left: each taken, or refused as Timeout; a failed transfer is
  // PeerLost, or Cancelled when its peer cancelled it (PoolEnd with that code): no other code.
  for (int taken = 0; taken < 16; ++taken) {
    try {
      (void)pool.next_notification(std::chrono::milliseconds(0));
    } catch (const memwire::Error& error) {
      if (error.code() == memwire::ErrorCode::Timeout) break;
      if (error.code() != memwire::ErrorCode::PeerLost &&
          error.code() != memwire::ErrorCode::Cancelled)
        std::abort();
    }
  }
  return 0;
}
