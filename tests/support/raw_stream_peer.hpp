#pragma once

// A peer speaking the stream transports' wire protocol directly over TCP, for tests that play
// a hostile or confused active side.
#include <gtest/gtest.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "ids.hpp"
#include "memwire/memwire.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"

namespace memwire::test_support {

class RawStreamPeer {
 public:
  explicit RawStreamPeer(const memwire::RdmaMetadata& metadata)
      : socket_(memwire::detail::connect_tcp(
            memwire::detail::parse_host_port(metadata.endpoint().transports.at(0).address),
            std::chrono::seconds(2))),
        key_(*memwire::parse_id(metadata.notification_key())),
        token_(*memwire::parse_id(metadata.token())) {}

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
};

}  // namespace memwire::test_support
