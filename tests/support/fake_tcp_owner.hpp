#pragma once

// A fake owner over tcp, for tests that play a hostile or scripted passive side against a real
// reader: it accepts connections, takes each one's Hello and hands the socket to the test.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "memwire/memwire.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::test_support {

// Plays a tcp owner: accepts connections, takes each one's Hello, then hands its socket to
// `serve` with its number (0 for the first), on a thread of its own. Notes when the reader
// closes one.
class FakeTcpOwner {
 public:
  using Serve = std::function<void(int connection, int socket)>;
  explicit FakeTcpOwner(Serve serve)
      : listener_(detail::listen_tcp("127.0.0.1", 0)), serve_(std::move(serve)) {
    acceptor_ = std::thread([this] { accept_all(); });
  }
  ~FakeTcpOwner() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    acceptor_.join();  // no new server thread from here on
    {
      std::lock_guard lock(mutex_);
      for (const auto& socket : sockets_) ::shutdown(socket.get(), SHUT_RDWR);
    }
    for (auto& server : servers_) server.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(detail::local_port(listener_.get()));
  }

  // Whether the reader closed connection `connection` within `timeout`.
  bool closed_by_reader(int connection, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return closed_changed_.wait_for(lock, timeout, [&] { return closed_.contains(connection); });
  }

 private:
  void accept_all() {
    for (int connection = 0;; ++connection) {
      detail::FileDescriptor socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!socket) return;
      detail::tune_data_socket(socket.get());  // no Nagle: answers leave when sent
      const int fd = socket.get();
      {
        std::lock_guard lock(mutex_);
        sockets_.push_back(std::move(socket));  // open until the destructor
      }
      servers_.emplace_back([this, connection, fd] { serve_one(connection, fd); });
    }
  }
  void serve_one(int connection, int socket) {
    detail::FrameHeader hello;
    if (!detail::receive_all(socket, &hello, sizeof hello)) return;
    std::string name(hello.length, '\0');
    if (hello.length > detail::FrameHeader::kMaxText ||
        !detail::receive_all(socket, name.data(), name.size()))
      return;
    serve_(connection, socket);
    // The reader decides when the connection ends: read on until it does.
    char sink[4096];
    while (::recv(socket, sink, sizeof sink, 0) > 0) {
    }
    std::lock_guard lock(mutex_);
    closed_.insert(connection);
    closed_changed_.notify_all();
  }

  detail::FileDescriptor listener_;
  Serve serve_;
  std::thread acceptor_;
  std::vector<std::thread> servers_;  // the acceptor's until it ends
  std::mutex mutex_;
  std::condition_variable closed_changed_;
  std::vector<detail::FileDescriptor> sockets_;
  std::set<int> closed_;
};

inline detail::FrameHeader read_request(int socket) {
  detail::FrameHeader request{};
  if (!detail::receive_all(socket, &request, sizeof request)) request.request_id = 0;
  return request;
}

inline void send_frame(int socket, const detail::FrameHeader& header,
                       std::span<const std::byte> payload = {}) {
  iovec parts[2] = {{const_cast<detail::FrameHeader*>(&header), sizeof header},
                    {const_cast<std::byte*>(payload.data()), payload.size()}};
  detail::send_all(socket, parts, 2);
}

inline detail::FrameHeader answer_header(detail::FrameType type, std::uint64_t request_id,
                                         std::uint64_t length) {
  detail::FrameHeader header;
  header.type = type;
  header.request_id = request_id;
  header.length = length;
  return header;
}

inline void send_all_bytes(int socket, std::span<const std::byte> bytes) {
  iovec part{const_cast<std::byte*>(bytes.data()), bytes.size()};
  detail::send_all(socket, &part, 1);
}

// The honest answer to `request`: its bytes, all `fill`.
inline void answer(int socket, const detail::FrameHeader& request, std::byte fill) {
  const std::vector<std::byte> payload(request.length, fill);
  send_frame(socket,
             answer_header(detail::FrameType::ReadResponse, request.request_id, request.length),
             payload);
}

// A real owner's metadata (so the reader has a key and a token), pointed at the fake owner.
inline RdmaMetadata pointed_at(const RdmaMetadata& metadata, const std::string& address) {
  auto json = metadata.to_json();
  const auto& real = metadata.endpoint().transports.at(0).address;
  json.replace(json.find(real), real.size(), address);
  return RdmaMetadata::from_json(json);
}

inline ConnectorOptions one_connection(const std::string& transport = "tcp") {
  ConnectorOptions options;
  options.transports = {transport};
  options.tcp.connections_per_peer = 1;  // every read to the owner on the same connection
  return options;
}

// Whether every byte of `target` is `fill` (a failure prints no 4 KiB dump).
inline bool filled_with(const std::vector<std::byte>& target, std::byte fill) {
  return std::all_of(target.begin(), target.end(), [&](std::byte b) { return b == fill; });
}

// The status `operation` ends with within `timeout`; a test failure when it is still running.
inline OperationStatus settled(Operation& operation, std::chrono::milliseconds timeout) {
  try {
    return operation.wait_for_completion(timeout);
  } catch (const Error& error) {
    if (!is_terminal(operation.status())) ADD_FAILURE() << error.what();
    return operation.status();
  }
}

// Two connectors, one connection each way, and a fresh zeroed target per read.
struct FakeOwnerReads : ::testing::Test {
  static constexpr std::size_t kSize = 4096;
  Connector owner{one_connection()};
  Connector reader{one_connection()};
  std::vector<std::byte> source = std::vector<std::byte>(kSize, std::byte{1});
  std::vector<std::vector<std::byte>> targets;

  // A read through `fake` into a fresh target, all zeros.
  ReadOperation begin_read(const FakeTcpOwner& fake) {
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    targets.emplace_back(kSize, std::byte{0});
    return reader.begin_read(pointed_at(readable.metadata(), fake.address()),
                             {Descriptor(std::span(targets.back()))});
  }
};

}  // namespace memwire::test_support
