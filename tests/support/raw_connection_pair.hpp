#pragma once
// A StreamConnection on one end of a Unix socket pair, the other end held raw by the test: what
// the connection sends is read back byte for byte (over a Unix socket, a sender's write is in
// the peer's queue when it returns), and what the test writes, the connection reads.

#include <sys/socket.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "transport/stream/stream_connection.hpp"

namespace memwire::test_support {

class RawConnectionPair {
 public:
  explicit RawConnectionPair(std::unique_ptr<detail::FrameHandler> handler) {
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
      throw std::runtime_error("socketpair failed");
    raw = detail::FileDescriptor(ends[0]);
    connection = std::make_shared<detail::StreamConnection>(detail::FileDescriptor(ends[1]),
                                                            std::move(handler), "raw", loop);
    connection->run();
  }
  ~RawConnectionPair() { connection->join(); }
  RawConnectionPair(const RawConnectionPair&) = delete;
  RawConnectionPair& operator=(const RawConnectionPair&) = delete;

  // What the raw end receives next: one header and `payload` bytes (short if it closed).
  std::pair<detail::FrameHeader, std::string> receive_raw(std::size_t payload) {
    detail::FrameHeader header;
    std::string bytes(payload, '\0');
    if (!detail::receive_all(raw.get(), &header, sizeof header) ||
        !detail::receive_all(raw.get(), bytes.data(), bytes.size()))
      bytes = "(the connection closed first)";
    return {header, bytes};
  }

  detail::EventLoop loop{"memwire-test"};  // outlives the connection it drives
  detail::FileDescriptor raw;
  std::shared_ptr<detail::StreamConnection> connection;
};

}  // namespace memwire::test_support
