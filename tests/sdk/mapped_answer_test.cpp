// A hostile or broken owner on the same host answering a shm read with a "mapped" location
// that does not hold up: the reader fails with a clear error, never hangs or crashes, and its
// buffer stays untouched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "file_descriptor.hpp"
#include "ids.hpp"
#include "memwire/memwire.hpp"
#include "shared_memory_index.hpp"
#include "support/error_code_of.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;

namespace {

// Plays the owner's side of the shm protocol on its own Unix socket: accepts the reader's
// probe, then answers its first read request with `location` (or with `payload_length` bytes
// of it, to break the framing).
class FakeOwner {
 public:
  FakeOwner(SharedLocation location, std::size_t payload_length = sizeof(SharedLocation))
      : name_("memwire-test-fake-" + to_hex(random_id())), listener_(listen_unix(name_)) {
    thread_ = std::thread([this, location, payload_length] { serve(location, payload_length); });
  }
  ~FakeOwner() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    if (connection_) ::shutdown(connection_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string address() const { return "@" + name_; }

 private:
  void serve(SharedLocation location, std::size_t payload_length) {
    connection_ = FileDescriptor(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection_) return;
    FrameHeader hello;
    if (!receive_all(connection_.get(), &hello, sizeof hello)) return;
    FrameHeader welcome;
    welcome.type = FrameType::HelloResponse;
    iovec part{&welcome, sizeof welcome};
    send_all(connection_.get(), &part, 1);
    FrameHeader request;
    if (!receive_all(connection_.get(), &request, sizeof request)) return;
    FrameHeader answer;
    answer.type = FrameType::ReadResponse;
    answer.request_id = request.request_id;
    answer.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    answer.length = payload_length;
    iovec parts[2] = {{&answer, sizeof answer}, {&location, payload_length}};
    send_all(connection_.get(), parts, 2);
    // Stay until the reader gives up; whatever it sends now is read and dropped.
    char sink[256];
    while (::recv(connection_.get(), sink, sizeof sink, 0) > 0) {
    }
  }

  std::string name_;
  FileDescriptor listener_;
  FileDescriptor connection_;
  std::thread thread_;
};

// A real owner's metadata, pointed at the fake owner's socket.
RdmaMetadata metadata_pointing_at(const std::string& json, const std::string& real_address,
                                  const std::string& fake_address) {
  auto rewritten = json;
  rewritten.replace(rewritten.find(real_address), real_address.size(), fake_address);
  return RdmaMetadata::from_json(rewritten);
}

struct MappedAnswers : ::testing::Test {
  ConnectorOptions shm_only = [] {
    ConnectorOptions options;
    options.transports = {"shm"};
    options.tcp_connections_per_peer = 1;  // the fake owner serves one connection
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
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    const auto metadata = readable.metadata();
    FakeOwner fake(location, payload_length);
    auto read = reader.begin_read(
        metadata_pointing_at(metadata.to_json(), metadata.endpoint().transports.at(0).address,
                             fake.address()),
        {Descriptor(std::span(target))});
    return error_code_of([&] { read.wait_for_completion(10s); });
  }
};

}  // namespace

TEST_F(MappedAnswers, AFileThatIsNotTheOneNamedIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()) + 1, 0,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(MappedAnswers, ARangeOutsideTheFileIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), kSize), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 6000,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(MappedAnswers, AFileShorterThanAnnouncedIsRefused) {
  ASSERT_EQ(::ftruncate(file.get(), 4096), 0);
  SharedLocation location{static_cast<std::uint64_t>(file.get()), inode_of(file.get()), 0, kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(MappedAnswers, APipeIsRefusedWithoutBlocking) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  FileDescriptor read_end(ends[0]), write_end(ends[1]);
  write_end.reset();  // no writer: a blocking open of the FIFO would wait for ever
  SharedLocation location{static_cast<std::uint64_t>(read_end.get()), inode_of(read_end.get()), 0,
                          kSize};
  EXPECT_EQ(read_through(location), ErrorCode::Transport);
  EXPECT_EQ(target, untouched);
}

TEST_F(MappedAnswers, AnAnswerOfTheWrongLengthBreaksTheConnection) {
  SharedLocation location{};
  EXPECT_EQ(read_through(location, 8), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}
