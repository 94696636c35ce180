// A hostile or broken owner on the same host answering a shm read with a "mapped" location
// that does not hold up (of one range, or of a piece request's blocks), or with an answer cut
// short: the reader fails with a clear error, never hangs or crashes, and its buffer stays
// untouched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "transport/shm/shared_memory_index.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/file_descriptor.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;

namespace {

// Plays the owner's side of the shm protocol on its own Unix socket: accepts the reader's
// probe, then lets `answer` reply to its first read request; then stays until the reader gives
// up, or hangs up at once.
using Answer = std::function<void(int socket, const FrameHeader& request)>;

class FakeOwner {
 public:
  explicit FakeOwner(Answer answer, bool hang_up = false)
      : name_("memwire-test-fake-" + to_hex(random_id())), listener_(listen_unix(name_)) {
    thread_ = std::thread([this, answer = std::move(answer), hang_up] { serve(answer, hang_up); });
  }
  ~FakeOwner() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    if (connection_) ::shutdown(connection_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string address() const { return "@" + name_; }

 private:
  void serve(const Answer& answer, bool hang_up) {
    connection_ = FileDescriptor(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection_) return;
    FrameHeader hello;
    if (!receive_all(connection_.get(), &hello, sizeof hello)) return;
    std::string name(hello.length, '\0');  // the reader's connector name
    if (hello.length > FrameHeader::kMaxText ||
        !receive_all(connection_.get(), name.data(), name.size()))
      return;
    FrameHeader welcome;
    welcome.type = FrameType::HelloResponse;
    iovec part{&welcome, sizeof welcome};
    send_all(connection_.get(), &part, 1);
    FrameHeader request;
    if (!receive_all(connection_.get(), &request, sizeof request)) return;
    answer(connection_.get(), request);
    if (hang_up) {
      ::shutdown(connection_.get(), SHUT_RDWR);
      return;
    }
    // Whatever the reader sends now is read and dropped.
    char sink[256];
    while (::recv(connection_.get(), sink, sizeof sink, 0) > 0) {
    }
  }

  std::string name_;
  FileDescriptor listener_;
  FileDescriptor connection_;
  std::thread thread_;
};

// Answers a read request with `location` as a mapped answer, `payload_length` bytes of it.
Answer mapped_answer(SharedLocation location, std::size_t payload_length) {
  return [location, payload_length](int socket, const FrameHeader& request) {
    FrameHeader answer;
    answer.type = FrameType::ReadResponse;
    answer.request_id = request.request_id;
    answer.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    answer.length = payload_length;
    iovec parts[2] = {{&answer, sizeof answer},
                      {const_cast<SharedLocation*>(&location), payload_length}};
    send_all(socket, parts, 2);
  };
}

// Answers a piece request with `span` and `offsets` as a mapped answer, claiming
// `payload_length` bytes (all of them by default).
Answer mapped_pieces_answer(SharedSpan span, std::vector<std::uint64_t> offsets,
                            std::size_t payload_length = 0) {
  return [span, offsets, payload_length](int socket, const FrameHeader& request) {
    std::vector<std::byte> payload(sizeof span + offsets.size() * sizeof(std::uint64_t));
    std::memcpy(payload.data(), &span, sizeof span);
    std::memcpy(payload.data() + sizeof span, offsets.data(),
                offsets.size() * sizeof(std::uint64_t));
    if (payload_length != 0) payload.resize(payload_length);
    FrameHeader answer;
    answer.type = FrameType::ReadResponse;
    answer.request_id = request.request_id;
    answer.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    answer.length = payload.size();
    iovec parts[2] = {{&answer, sizeof answer}, {payload.data(), payload.size()}};
    send_all(socket, parts, 2);
  };
}

// A real owner's metadata, pointed at the fake owner's socket.
RdmaMetadata metadata_pointing_at(const std::string& json, const std::string& real_address,
                                  const std::string& fake_address) {
  auto rewritten = json;
  rewritten.replace(rewritten.find(real_address), real_address.size(), fake_address);
  return RdmaMetadata::from_json(rewritten);
}

struct BrokenOwnerAnswers : ::testing::Test {
  ConnectorOptions shm_only = [] {
    ConnectorOptions options;
    options.transports = {"shm"};
    options.tcp.connections_per_peer = 1;  // the fake owner serves one connection
    return options;
  }();
  Connector owner{shm_only};
  Connector reader{shm_only};
  // Large enough to move through memory rather than on the socket.
  static constexpr std::size_t kSize = 256 << 10;
  std::vector<std::byte> source = std::vector<std::byte>(kSize, std::byte{1});
  std::vector<std::byte> target = std::vector<std::byte>(kSize, std::byte{0x5a});
  const std::vector<std::byte> untouched = target;
  // A real memfd of this process, for answers that name a file that exists.
  FileDescriptor file{::memfd_create("memwire-test", MFD_CLOEXEC)};

  std::uint64_t inode_of(int fd) {
    struct stat status {};
    ::fstat(fd, &status);
    return status.st_ino;
  }

  // Reads through a fake owner that answers with `location`; the error code it ends with.
  ErrorCode read_through(SharedLocation location,
                         std::size_t payload_length = sizeof(SharedLocation)) {
    return read_through(mapped_answer(location, payload_length));
  }

  ErrorCode read_through(Answer answer, bool hang_up = false) {
    return read_through(std::move(answer), {Descriptor(std::span(source))},
                        {Descriptor(std::span(target))}, hang_up);
  }

  // The same in two halves: one piece request of two blocks.
  ErrorCode read_pieces_through(Answer answer) {
    const auto half = kSize / 2;
    return read_through(std::move(answer),
                        {Descriptor(source.data(), half), Descriptor(source.data() + half, half)},
                        {Descriptor(target.data(), half), Descriptor(target.data() + half, half)});
  }

  ErrorCode read_through(Answer answer, std::vector<Descriptor> from, std::vector<Descriptor> into,
                         bool hang_up = false) {
    auto readable = owner.create_readable(std::move(from));
    const auto metadata = readable.metadata();
    FakeOwner fake(std::move(answer), hang_up);
    auto read = reader.begin_read(
        metadata_pointing_at(metadata.to_json(), metadata.endpoint().transports.at(0).address,
                             fake.address()),
        std::move(into));
    return error_code_of([&] { read.wait_for_completion(10s); });
  }
};

}  // namespace

TEST_F(BrokenOwnerAnswers, AFileThatIsNotTheOneNamedIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()) + 1, 0,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, ARangeOutsideTheFileIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 6000,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AFileShorterThanAnnouncedIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), 4096), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 0, kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, APipeIsRefusedWithoutBlocking) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  FileDescriptor read_end(ends[0]), write_end(ends[1]);
  write_end.reset();  // no writer: a blocking open of the FIFO would wait for ever
  SharedLocation location{static_cast<std::uint64_t>(read_end.get()), inode_of(read_end.get()), 0,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AnAnswerOfTheWrongLengthBreaksTheConnection) {
  SharedLocation location{};
  EXPECT_EQ(read_through(location, 8), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, APieceThatLiesOutsideItsSpanIsRefusedBeforeAnyBlockIsCopied) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  const SharedSpan span{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 0, kSize};
  // The first block lies in the span; the second would end past it.
  EXPECT_EQ(read_pieces_through(mapped_pieces_answer(span, {0, kSize / 2 + 4096})),
            ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, ASpanThatDoesNotStartOnAPageIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), 2 * kSize), 0);
  const SharedSpan span{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 100, kSize};
  EXPECT_EQ(read_pieces_through(mapped_pieces_answer(span, {0, kSize / 2})), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AMappedPieceAnswerOfTheWrongLengthBreaksTheConnection) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  const SharedSpan span{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 0, kSize};
  // One offset for two pieces.
  EXPECT_EQ(read_pieces_through(mapped_pieces_answer(span, {0, kSize / 2}, sizeof span + 8)),
            ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AnAnswerCutShortFailsTheReadAtOnce) {
  // Not a mapped answer: a small read's bytes on the socket, fewer than announced, then the
  // owner hangs up. The request was already matched, so only its own failure can end it.
  source.resize(4096);
  target.resize(4096);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(read_through(
                [](int socket, const FrameHeader& request) {
                  FrameHeader answer;
                  answer.type = FrameType::ReadResponse;
                  answer.request_id = request.request_id;
                  answer.length = request.length;
                  std::vector<std::byte> some(100, std::byte{0x77});
                  iovec parts[2] = {{&answer, sizeof answer}, {some.data(), some.size()}};
                  send_all(socket, parts, 2);
                },
                /*hang_up=*/true),
            ErrorCode::PeerLost);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "waited for the timeout";
}
