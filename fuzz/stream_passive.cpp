// The stream transports' passive side: what a peer sends to a connector that serves a readable
// and a writable (TCP here; shm's Unix socket carries the same frames). Input: the bytes a peer
// sends on one fresh connection. So that the fuzzer gets past the access check, a frame header
// whose key is all zero gets the readable's key, one whose key is 0...01 the writable's, and a
// token of all zero the token of the operation its key names. Every answer must come, and the
// connection must close once the peer has half-closed: the passive side may refuse, never hang.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ids.hpp"
#include "loopback.hpp"
#include "memwire/connector.hpp"
#include "transport/stream/frame.hpp"

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

std::uint16_t tcp_port(const memwire::RdmaMetadata& metadata) {
  for (const auto& offer : metadata.endpoint().transports)
    if (offer.name == "tcp")
      return static_cast<std::uint16_t>(
          std::stoul(offer.address.substr(offer.address.rfind(':') + 1)));
  std::abort();
}

// Patches keys and tokens frame by frame, skipping the payload a frame of that type carries.
std::string with_live_ids(const std::uint8_t* data, std::size_t size, const Served& readable,
                          const Served& writable) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  static constexpr Id128 kZero{};
  static constexpr Id128 kOne{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::size_t at = 0;
  while (bytes.size() - at >= sizeof(FrameHeader)) {
    FrameHeader header;
    std::memcpy(&header, bytes.data() + at, sizeof header);
    const Served* live = header.key == kOne ? &writable : &readable;
    if (header.key == kZero || header.key == kOne) header.key = live->key;
    if (header.token == kZero) header.token = live->token;
    std::memcpy(bytes.data() + at, &header, sizeof header);
    at += sizeof header;
    const bool carries =
        header.type == FrameType::Hello || header.type == FrameType::Notice ||
        (header.type == FrameType::WriteRequest && (header.flags & frame_flags::kCrossMemory) == 0);
    if (carries) at += std::min<std::uint64_t>(header.length, bytes.size() - at);
    if (memwire::detail::is_piece_request(header.type)) {  // the piece list, then a write's bytes
      std::uint64_t skip = memwire::detail::piece_list_bytes(header);
      if (header.type == FrameType::WritePiecesRequest &&
          (header.flags & frame_flags::kCrossMemory) == 0)
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
  const auto metadata = readable.metadata();
  const auto bytes = with_live_ids(data, size, served_by(metadata), served_by(writable.metadata()));

  const int fd = memwire::fuzz::connect_loopback(tcp_port(metadata));
  memwire::fuzz::send_then_half_close(fd, bytes);
  if (!memwire::fuzz::drain_until_closed(fd)) {
    std::fprintf(stderr, "the passive side kept the connection open after the peer's end\n");
    std::abort();
  }
  ::close(fd);
  return 0;
}
