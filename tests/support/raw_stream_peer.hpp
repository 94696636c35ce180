#pragma once

// A peer speaking the stream transports' wire protocol directly over TCP, for tests that play
// a hostile or confused active side.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "memwire/memwire.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/ids.hpp"

namespace memwire::test_support {

class RawStreamPeer {
 public:
  explicit RawStreamPeer(const memwire::RdmaMetadata& metadata)
      : socket_(memwire::detail::connect_tcp(
            memwire::detail::parse_host_port(metadata.endpoint().transports.at(0).address),
            std::chrono::seconds(2))),
        key_(*memwire::parse_id(metadata.notification_key())),
        token_(*memwire::parse_id(metadata.token())) {}
  // A peer of a pool, holding its metadata (what every peer it admits has).
  explicit RawStreamPeer(const memwire::PoolMetadata& pool)
      : socket_(memwire::detail::connect_tcp(
            memwire::detail::parse_host_port(pool.endpoint().transports.at(0).address),
            std::chrono::seconds(2))),
        key_(*memwire::parse_id(pool.key())),
        token_(*memwire::parse_id(pool.token())),
        generation_(static_cast<std::uint32_t>(pool.generation())) {}

  // Says who it is, as a connector's first frame does.
  void hello(const std::string& name) {
    memwire::detail::FrameHeader header;
    header.type = memwire::detail::FrameType::Hello;
    header.request_id = 42;  // a refusal answers it
    header.length = name.size();
    send(header,
         std::vector<std::byte>(reinterpret_cast<const std::byte*>(name.data()),
                                reinterpret_cast<const std::byte*>(name.data()) + name.size()));
  }

  // A pool request of transfer `transfer` moving `pieces` (region, offset, length), with its
  // tag after the piece list and, for a write, `bytes` after that.
  void pool_request(memwire::detail::FrameType type, std::uint64_t transfer,
                    const std::vector<memwire::detail::FramePiece>& pieces, const std::string& tag,
                    std::uint8_t flags = 0, const std::vector<std::byte>& bytes = {}) {
    memwire::detail::PoolFrameHeader header;
    header.type = type;
    header.flags = flags;
    header.request_id = 42;
    header.piece_count = static_cast<std::uint32_t>(pieces.size());
    header.generation = generation_;
    header.transfer = transfer;
    for (const auto& piece : pieces) header.length += piece.length;
    header.tag_bytes = static_cast<std::uint32_t>(tag.size());
    header.key = key_;
    header.token = token_;
    std::vector<std::byte> payload(pieces.size() * sizeof(memwire::detail::FramePiece));
    std::memcpy(payload.data(), pieces.data(), payload.size());
    payload.insert(payload.end(), reinterpret_cast<const std::byte*>(tag.data()),
                   reinterpret_cast<const std::byte*>(tag.data()) + tag.size());
    payload.insert(payload.end(), bytes.begin(), bytes.end());
    send(memwire::detail::as_frame(header), payload);
  }

  // The last step of transfer `transfer`: done (code 0) or failed with `text`.
  void pool_end(std::uint64_t transfer, std::uint8_t code = 0, const std::string& text = {}) {
    memwire::detail::PoolFrameHeader header;
    header.type = memwire::detail::FrameType::PoolEnd;
    header.code = code;
    header.request_id = 42;
    header.generation = generation_;
    header.transfer = transfer;
    header.length = text.size();
    header.key = key_;
    header.token = token_;
    send(memwire::detail::as_frame(header),
         std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                reinterpret_cast<const std::byte*>(text.data()) + text.size()));
  }

  memwire::detail::FrameHeader request(memwire::detail::FrameType type, std::uint32_t index,
                                       std::uint64_t offset, std::uint64_t length) const {
    memwire::detail::FrameHeader header;
    header.type = type;
    header.request_id = 42;
    header.index = index;
    header.offset = offset;
    header.length = length;
    header.key = key_;
    header.token = token_;
    return header;
  }

  void send(memwire::detail::FrameHeader header, const std::vector<std::byte>& payload = {}) {
    iovec parts[2] = {{&header, sizeof header},
                      {const_cast<std::byte*>(payload.data()), payload.size()}};
    ASSERT_TRUE(memwire::detail::send_all(socket_.get(), parts, 2));
  }

  // The answer's error code (0 = ok) and payload.
  std::pair<std::uint8_t, std::vector<std::byte>> answer() {
    memwire::detail::FrameHeader header;
    EXPECT_TRUE(memwire::detail::receive_all(socket_.get(), &header, sizeof header));
    std::vector<std::byte> payload(header.length);
    EXPECT_TRUE(memwire::detail::receive_all(socket_.get(), payload.data(), payload.size()));
    EXPECT_EQ(header.request_id, 42u);
    return {header.code, payload};
  }

  int socket() const noexcept { return socket_.get(); }

  bool hung_up() {
    memwire::detail::FrameHeader header;
    return !memwire::detail::receive_all(socket_.get(), &header, sizeof header);
  }

 private:
  memwire::detail::FileDescriptor socket_;
  memwire::Id128 key_, token_;
  std::uint32_t generation_ = 0;
};

}  // namespace memwire::test_support
