// A hostile owner, played over tcp against a real reader: an answer the reader did not ask for
// (a flag, a request id, a type) is a protocol error that closes its connection. A read never
// reports success with its bytes not here, and no connection stays in the pool stuck reading
// a bogus payload.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "file_descriptor.hpp"
#include "memwire/memwire.hpp"
#include "shared_memory_index.hpp"
#include "support/operation_waits.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;
using memwire::test_support::failure_code;

namespace {

constexpr std::size_t kSize = 4096;

// Plays a tcp owner: accepts connections, takes each one's Hello, then hands its socket to
// `serve` with its number (0 for the first), on a thread of its own. Notes when the reader
// closes one.
class FakeTcpOwner {
 public:
  using Serve = std::function<void(int connection, int socket)>;
  explicit FakeTcpOwner(Serve serve)
      : listener_(listen_tcp("127.0.0.1", 0)), serve_(std::move(serve)) {
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
  std::string address() const { return "127.0.0.1:" + std::to_string(local_port(listener_.get())); }

  // Whether the reader closed connection `connection` within `timeout`.
  bool closed_by_reader(int connection, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return closed_changed_.wait_for(lock, timeout, [&] { return closed_.contains(connection); });
  }

 private:
  void accept_all() {
    for (int connection = 0;; ++connection) {
      FileDescriptor socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!socket) return;
      tune_data_socket(socket.get());  // no Nagle: answers leave when sent
      const int fd = socket.get();
      {
        std::lock_guard lock(mutex_);
        sockets_.push_back(std::move(socket));  // open until the destructor
      }
      servers_.emplace_back([this, connection, fd] { serve_one(connection, fd); });
    }
  }
  void serve_one(int connection, int socket) {
    FrameHeader hello;
    if (!receive_all(socket, &hello, sizeof hello)) return;
    std::string name(hello.length, '\0');
    if (hello.length > FrameHeader::kMaxText || !receive_all(socket, name.data(), name.size()))
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

  FileDescriptor listener_;
  Serve serve_;
  std::thread acceptor_;
  std::vector<std::thread> servers_;  // the acceptor's until it ends
  std::mutex mutex_;
  std::condition_variable closed_changed_;
  std::vector<FileDescriptor> sockets_;
  std::set<int> closed_;
};

FrameHeader read_request(int socket) {
  FrameHeader request{};
  if (!receive_all(socket, &request, sizeof request)) request.request_id = 0;
  return request;
}

void send_frame(int socket, const FrameHeader& header, std::span<const std::byte> payload = {}) {
  iovec parts[2] = {{const_cast<FrameHeader*>(&header), sizeof header},
                    {const_cast<std::byte*>(payload.data()), payload.size()}};
  send_all(socket, parts, 2);
}

FrameHeader answer_header(FrameType type, std::uint64_t request_id, std::uint64_t length) {
  FrameHeader header;
  header.type = type;
  header.request_id = request_id;
  header.length = length;
  return header;
}

void send_all_bytes(int socket, std::span<const std::byte> bytes) {
  iovec part{const_cast<std::byte*>(bytes.data()), bytes.size()};
  send_all(socket, &part, 1);
}

// The honest answer to `request`: its bytes, all `fill`.
void answer(int socket, const FrameHeader& request, std::byte fill) {
  const std::vector<std::byte> payload(request.length, fill);
  send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id, request.length),
             payload);
}

// A real owner's metadata (so the reader has a key and a token), pointed at the fake owner.
RdmaMetadata pointed_at(const RdmaMetadata& metadata, const std::string& address) {
  auto json = metadata.to_json();
  const auto& real = metadata.endpoint().transports.at(0).address;
  json.replace(json.find(real), real.size(), address);
  return RdmaMetadata::from_json(json);
}

ConnectorOptions one_connection() {
  ConnectorOptions options;
  options.transports = {"tcp"};
  options.tcp.connections_per_peer = 1;  // every read to the owner on the same connection
  return options;
}

// Whether every byte of `target` is `fill` (a failure prints no 4 KiB dump).
bool filled_with(const std::vector<std::byte>& target, std::byte fill) {
  return std::all_of(target.begin(), target.end(), [&](std::byte b) { return b == fill; });
}

// The status `operation` ends with within `timeout`; a test failure when it is still running.
OperationStatus settled(Operation& operation, std::chrono::milliseconds timeout) {
  try {
    return operation.wait_for_completion(timeout);
  } catch (const Error& error) {
    if (!is_terminal(operation.status())) ADD_FAILURE() << error.what();
    return operation.status();
  }
}

struct HostileOwner : ::testing::Test {
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

}  // namespace

// Over tcp nothing is cross-memory: an answer that says the owner copied the bytes into the
// reader's memory itself cannot be true, and must not complete the read.
TEST_F(HostileOwner, ACrossMemoryAnswerToASocketReadIsAProtocolError) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    auto header = answer_header(FrameType::ReadResponse, request.request_id, 0);
    header.flags = frame_flags::kCrossMemory;
    send_frame(socket, header);
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the connection outlived the protocol error";
}

// A mapping was asked for by none of the reader's requests: the answer that offers one breaks
// the connection, not just the read.
TEST_F(HostileOwner, AMappedAnswerNobodyAskedForClosesTheConnection) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    auto header =
        answer_header(FrameType::ReadResponse, request.request_id, sizeof(SharedLocation));
    header.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    const std::vector<std::byte> location(sizeof(SharedLocation));
    send_frame(socket, header, location);
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the connection outlived the protocol error";
}

// A read request is answered by a ReadResponse: a write's or a notice's answer to it would end
// the read with its bytes not here.
TEST_F(HostileOwner, AReadAnsweredByAnotherTypeOfAnswerIsAProtocolError) {
  FakeTcpOwner fake([](int connection, int socket) {
    auto request = read_request(socket);
    const auto type = connection == 0 ? FrameType::WriteResponse : FrameType::NoticeResponse;
    send_frame(socket, answer_header(type, request.request_id, 0));
  });
  targets.reserve(2);
  for (const char* answered_by : {"a WriteResponse", "a NoticeResponse"}) {
    auto read = begin_read(fake);
    EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol) << answered_by;
    EXPECT_EQ(read.status(), OperationStatus::Errored) << answered_by;
  }
  EXPECT_TRUE(filled_with(targets[0], std::byte{0}));
}

// An answer to a request id the reader never used, claiming 2^40 bytes: skipping them would hold
// the connection forever (and every read after it, the answers among those bytes). It closes
// instead, and the next read dials a new connection.
TEST_F(HostileOwner, AnAnswerToAnUnknownRequestClosesItsConnection) {
  FakeTcpOwner fake([](int connection, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    answer(socket, request, std::byte(0x11 + connection));
    if (connection == 0)
      send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id + 1000,
                                       std::uint64_t{1} << 40));
  });
  targets.reserve(2);
  auto first = begin_read(fake);
  ASSERT_EQ(settled(first, 5s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[0], std::byte{0x11}));
  EXPECT_TRUE(fake.closed_by_reader(0, 5s)) << "the reader went on reading the bogus payload";
  auto second = begin_read(fake);
  EXPECT_EQ(settled(second, 2s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[1], std::byte{0x12}));
}

// The same answer ahead of the real one: the read waiting on the connection fails at once with
// a Protocol error, instead of waiting for an answer that would be skipped with the rest.
TEST_F(HostileOwner, AnAnswerToAnUnknownRequestFailsTheReadsWaitingOnItsConnection) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id + 1000,
                                     std::uint64_t{1} << 40));
    answer(socket, request, std::byte{0x21});
  });
  targets.reserve(1);
  auto read = begin_read(fake);
  EXPECT_EQ(failure_code(read, 5s), ErrorCode::Protocol);
  EXPECT_EQ(read.status(), OperationStatus::Errored);
}

// Failure notices carry no request id, so the answer to one comes with id 0: a text, no more,
// that is dropped. A longer one is no such answer.
TEST_F(HostileOwner, OnlyAShortNoticeAnswerMayComeWithoutARequest) {
  FakeTcpOwner fake([](int, int socket) {
    auto request = read_request(socket);
    if (request.request_id == 0) return;
    const std::string text = "no such operation";
    auto refusal = answer_header(FrameType::NoticeResponse, 0, text.size());
    refusal.code = wire_code(ErrorCode::NotFound);
    send_frame(socket, refusal, std::as_bytes(std::span(text)));
    answer(socket, request, std::byte{0x31});

    request = read_request(socket);
    if (request.request_id == 0) return;
    const std::vector<std::byte> long_payload(FrameHeader::kMaxText + 1, std::byte{0x7f});
    send_frame(socket, answer_header(FrameType::NoticeResponse, 0, long_payload.size()),
               long_payload);
    answer(socket, request, std::byte{0x32});
  });
  targets.reserve(2);
  auto first = begin_read(fake);
  ASSERT_EQ(settled(first, 5s), OperationStatus::Complete);
  EXPECT_TRUE(filled_with(targets[0], std::byte{0x31}));
  auto second = begin_read(fake);
  EXPECT_EQ(failure_code(second, 5s), ErrorCode::Protocol);
}

// Issue 36, item 8: an owner that stalls in the middle of a read's answer. Cancelling the read
// stops the bytes at once: cancel() does not wait for the owner, nothing lands in the buffer
// after it returns, and the connection, its framing intact, serves the next read.
TEST_F(HostileOwner, ACancelledReadTakesNoMoreBytesAndWaitsForNoStalledOwner) {
  constexpr std::size_t kBig = 1u << 20, kFirst = 64u << 10;
  std::promise<void> go;
  auto went = go.get_future().share();
  FakeTcpOwner fake([&, went](int connection, int socket) {
    if (connection != 0) return;
    auto request = read_request(socket);
    const std::vector<std::byte> first(kFirst, std::byte{0xAA}),
        rest(kBig - kFirst, std::byte{0xBB});
    send_frame(socket, answer_header(FrameType::ReadResponse, request.request_id, kBig), first);
    if (went.wait_for(20s) != std::future_status::ready) return;
    send_all_bytes(socket, rest);
    // The cancelled read's failure notice comes first: taken and left unanswered.
    auto next = read_request(socket);
    while (next.type == FrameType::Notice) {
      std::string text(next.length, '\0');
      if (next.length > FrameHeader::kMaxText || !receive_all(socket, text.data(), text.size()))
        return;
      next = read_request(socket);
    }
    answer(socket, next, std::byte{0x22});
  });
  std::vector<std::byte> big_source(kBig, std::byte{1}), big(kBig, std::byte{0});
  auto readable = owner.create_readable({Descriptor(std::span(big_source))});
  auto read = reader.begin_read(pointed_at(readable.metadata(), fake.address()),
                                {Descriptor(std::span(big))});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::atomic_ref(big[kFirst - 1]).load() != std::byte{0xAA} &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_EQ(std::atomic_ref(big[kFirst - 1]).load(), std::byte{0xAA})
      << "the first part never came";
  const auto began = std::chrono::steady_clock::now();
  read.cancel();
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_LT(took, 1s) << "cancel waited for the stalled owner";
  go.set_value();
  targets.reserve(1);
  auto next = begin_read(fake);  // the same connection: connections_per_peer is 1
  EXPECT_EQ(settled(next, 10s), OperationStatus::Complete) << next.error_message();
  EXPECT_TRUE(filled_with(targets.back(), std::byte{0x22}));
  EXPECT_EQ(std::count(big.begin(), big.end(), std::byte{0xBB}), 0)
      << "bytes landed in the buffer of a cancelled read";
}
