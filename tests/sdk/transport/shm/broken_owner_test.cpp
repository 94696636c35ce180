// A hostile or broken owner on the same host answering a shm read with a "mapped" location
// that does not hold up (of one range, or of a piece request's blocks), with a descriptor that is
// not a sealed memfd of the size it says, or with an answer cut short: the reader fails with a
// clear error, never hangs or crashes, never opens anything the owner names, keeps no descriptor
// it was sent, and its buffer stays untouched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
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

// With `own_process`, it serves from a process of its own (forked), as a hostile owner would.
class FakeOwner {
 public:
  explicit FakeOwner(Answer answer, bool hang_up = false, bool own_process = false)
      : name_("memwire-test-fake-" + to_hex(random_id())),
        listener_(own_process ? FileDescriptor() : listen_unix(name_)) {
    if (own_process) {
      // The listener is the child's own: the kernel names its process as the reader's peer.
      int ready[2];
      if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
      process_ = ::fork();
      if (process_ == 0) {
        listener_ = listen_unix(name_);
        [[maybe_unused]] auto told = ::write(ready[1], "r", 1);
        serve(answer, hang_up);
        ::_exit(0);
      }
      ::close(ready[1]);
      char byte;
      [[maybe_unused]] auto heard = ::read(ready[0], &byte, 1);
      ::close(ready[0]);
      return;
    }
    thread_ = std::thread([this, answer = std::move(answer), hang_up] { serve(answer, hang_up); });
  }
  ~FakeOwner() {
    if (listener_) ::shutdown(listener_.get(), SHUT_RDWR);
    if (connection_) ::shutdown(connection_.get(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (process_ > 0) {
      ::kill(process_, SIGKILL);
      ::waitpid(process_, nullptr, 0);
    }
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
  pid_t process_ = -1;
};

FrameType answer_type(const FrameHeader& request) {
  return request.type == FrameType::WriteRequest || request.type == FrameType::WritePiecesRequest
             ? FrameType::WriteResponse
             : FrameType::ReadResponse;
}

// Sends `parts` in one message with `passed` (descriptors, SCM_RIGHTS) on its first byte.
void send_passing(int socket, iovec* parts, int count, std::vector<int> passed) {
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = static_cast<std::size_t>(count);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * passed.size()));
  if (!passed.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    auto* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * passed.size());
    std::memcpy(CMSG_DATA(header), passed.data(), sizeof(int) * passed.size());
  }
  [[maybe_unused]] auto sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
}

// Answers with `location` as a mapped answer, passing `passed` (flag kDescriptor when
// `flagged`).
Answer passing_answer(SharedLocation location, std::vector<int> passed, bool flagged = true) {
  return [location, passed, flagged](int socket, const FrameHeader& request) {
    FrameHeader answer;
    answer.type = answer_type(request);
    answer.request_id = request.request_id;
    answer.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
    if (flagged) answer.flags |= frame_flags::kDescriptor;
    answer.length = sizeof location;
    iovec parts[2] = {{&answer, sizeof answer},
                      {const_cast<SharedLocation*>(&location), sizeof location}};
    send_passing(socket, parts, 2, passed);
  };
}

// What the descriptors this process holds name ("/memfd:memwire-test (deleted)", "pipe:"),
// sockets aside: the reader's connections to fake owners that went away are not what this is
// about.
std::multiset<std::string> open_descriptors() {
  std::multiset<std::string> open;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code failed;
    auto target = std::filesystem::read_symlink(entry.path(), failed).string();
    if (!failed && !target.starts_with("socket:") && !target.starts_with("/proc/"))
      open.insert(target.substr(0, target.find('[')));
  }
  return open;
}

FileDescriptor sealed_memfd(off_t size, int seals) {
  FileDescriptor file(::memfd_create("memwire-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_EQ(::ftruncate(file.get(), size), 0);
  if (seals != 0) {
    EXPECT_EQ(::fcntl(file.get(), F_ADD_SEALS, seals), 0);
  }
  return file;
}
constexpr int kAllSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Answers a request with `location` as a mapped answer, `payload_length` bytes of it.
Answer mapped_answer(SharedLocation location, std::size_t payload_length) {
  return [location, payload_length](int socket, const FrameHeader& request) {
    FrameHeader answer;
    answer.type = answer_type(request);
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

  // Reads through a fake owner that answers with `location`; the error code it ends with.
  ErrorCode read_through(SharedLocation location,
                         std::size_t payload_length = sizeof(SharedLocation)) {
    return read_through(mapped_answer(location, payload_length));
  }
  // A sealed memfd of kSize and a location in it that holds up, for answers that change one
  // thing.
  FileDescriptor good = sealed_memfd(kSize, kAllSeals);
  SharedLocation good_location{7, kSize, 0, kSize};

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
    return read_from(fake, metadata, std::move(into));
  }

  ErrorCode read_from(const FakeOwner& fake, const RdmaMetadata& metadata,
                      std::vector<Descriptor> into) {
    auto read = reader.begin_read(
        metadata_pointing_at(metadata.to_json(), metadata.endpoint().transports.at(0).address,
                             fake.address()),
        std::move(into));
    return error_code_of([&] { read.wait_for_completion(10s); });
  }

  // Writes `source` through a fake owner in a process of its own; the error code it ends with.
  ErrorCode write_through_own_process(Answer answer) {
    auto writable = owner.create_writable({Descriptor(std::span(target))});
    const auto metadata = writable.metadata();
    FakeOwner fake(std::move(answer), false, /*own_process=*/true);
    auto write = reader.begin_write(
        {Descriptor(std::span(source))},
        metadata_pointing_at(metadata.to_json(), metadata.endpoint().transports.at(0).address,
                             fake.address()));
    return error_code_of([&] { write.wait_for_completion(10s); });
  }
};

}  // namespace

// The confused deputy: an owner answers a mapped write naming its own descriptor of a file it
// may only read (the old answer: a descriptor number and inode, for /proc/<owner>/fd/<n>). The
// reader opens nothing the owner names: the write fails and lands nowhere.
TEST_F(BrokenOwnerAnswers, AnAnswerNamingADescriptorNumberOpensNothing) {
  char path[] = "/tmp/memwire-deputy-XXXXXX";
  FileDescriptor created(::mkostemp(path, O_CLOEXEC));
  ASSERT_TRUE(created);
  ASSERT_EQ(::fchmod(created.get(), 0600), 0);
  ASSERT_EQ(::ftruncate(created.get(), kSize), 0);
  const std::string victim = path;
  const auto code = write_through_own_process([victim](int socket, const FrameHeader& request) {
    // In the owner's process: a descriptor it can only read through.
    const int file = ::open(victim.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat status {};
    ::fstat(file, &status);
    SharedLocation named{static_cast<std::uint64_t>(file), status.st_ino, 0, kSize};
    mapped_answer(named, sizeof named)(socket, request);
  });
  std::vector<std::byte> after(kSize);
  ASSERT_EQ(::pread(created.get(), after.data(), kSize, 0), static_cast<ssize_t>(kSize));
  ::unlink(path);
  EXPECT_EQ(std::count(after.begin(), after.end(), std::byte{0}), static_cast<long>(kSize))
      << "the writer's bytes landed in a file the owner could only read";
  EXPECT_EQ(code, ErrorCode::Protocol);
}

TEST_F(BrokenOwnerAnswers, ABufferNeverSentIsRefused) {
  EXPECT_EQ(read_through(good_location), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AnAnswerWhoseDescriptorNeverCameIsRefused) {
  EXPECT_EQ(read_through(passing_answer(good_location, {})), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

// What a peer maps must be a memfd sealed against shrinking, growing and new seals, of the
// size the answer says; anything else is refused before any mapping, and closed.
TEST_F(BrokenOwnerAnswers, ADescriptorThatIsNotASealedMemfdOfTheSizeSaidIsRefused) {
  const auto before = open_descriptors();
  char path[] = "/tmp/memwire-plain-XXXXXX";
  FileDescriptor plain(::mkostemp(path, O_CLOEXEC));
  ::unlink(path);
  ASSERT_EQ(::ftruncate(plain.get(), kSize), 0);
  FileDescriptor unsealable(::memfd_create("memwire-test", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(unsealable.get(), kSize), 0);
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  FileDescriptor read_end(ends[0]), write_end(ends[1]);
  std::vector<FileDescriptor> bad;
  bad.push_back(std::move(plain));
  bad.push_back(std::move(unsealable));
  bad.push_back(sealed_memfd(kSize, 0));                            // no seals
  bad.push_back(sealed_memfd(kSize, F_SEAL_SHRINK | F_SEAL_SEAL));  // may grow
  bad.push_back(sealed_memfd(kSize, F_SEAL_GROW | F_SEAL_SEAL));    // may shrink
  bad.push_back(sealed_memfd(kSize, F_SEAL_SHRINK | F_SEAL_GROW));  // may take new seals
  bad.push_back(sealed_memfd(4096, kAllSeals));                     // shorter than said
  bad.push_back(sealed_memfd(2 * kSize, kAllSeals));                // longer than said
  bad.push_back(std::move(read_end));                               // no file at all
  for (std::size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(read_through(passing_answer(good_location, {bad[i].get()})), ErrorCode::Protocol)
        << "descriptor " << i;
    EXPECT_EQ(target, untouched) << "descriptor " << i;
  }
  bad.clear();
  write_end.reset();
  EXPECT_EQ(open_descriptors(), before) << "a refused descriptor stayed open";
}

TEST_F(BrokenOwnerAnswers, UnexpectedDescriptorsAreRefusedAndClosed) {
  const auto before = open_descriptors();
  // Two in one message; one with an answer that does not say it carries one.
  EXPECT_NE(read_through(passing_answer(good_location, {good.get(), good.get()})),
            ErrorCode::Timeout);
  EXPECT_NE(read_through(passing_answer(good_location, {good.get()}, /*flagged=*/false)),
            ErrorCode::Timeout);
  // One with an answer that is not mapped at all ("copied"): the read may well complete (its
  // one request was the whole of it), but the descriptor is refused, not kept.
  {
    auto readable = owner.create_readable({Descriptor(std::span(source))});
    const auto metadata = readable.metadata();
    FakeOwner fake([&](int socket, const FrameHeader& request) {
      FrameHeader answer;
      answer.type = FrameType::ReadResponse;
      answer.request_id = request.request_id;
      answer.flags = frame_flags::kCrossMemory;
      iovec part{&answer, sizeof answer};
      send_passing(socket, &part, 1, {good.get()});
    });
    auto read = reader.begin_read(
        metadata_pointing_at(metadata.to_json(), metadata.endpoint().transports.at(0).address,
                             fake.address()),
        {Descriptor(std::span(target))});
    try {
      (void)read.wait_for_completion(10s);
    } catch (const Error&) {
    }
  }
  EXPECT_EQ(target, untouched);
  // The reader's connections close on the loop: give it a moment.
  for (int i = 0; i < 200 && open_descriptors() != before; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(open_descriptors(), before) << "a received descriptor stayed open";
}

TEST_F(BrokenOwnerAnswers, ARangeOutsideTheFileIsRefused) {
  auto location = good_location;
  location.offset = 6000;
  EXPECT_EQ(read_through(passing_answer(location, {good.get()})), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AnAnswerOfTheWrongLengthBreaksTheConnection) {
  SharedLocation location{};
  EXPECT_EQ(read_through(location, 8), ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

// Answers a piece request with `span` and `offsets`, passing `passed` with it.
Answer passing_pieces_answer(SharedSpan span, std::vector<std::uint64_t> offsets, int passed) {
  return [span, offsets, passed](int socket, const FrameHeader& request) {
    std::vector<std::byte> payload(sizeof span + offsets.size() * sizeof(std::uint64_t));
    std::memcpy(payload.data(), &span, sizeof span);
    std::memcpy(payload.data() + sizeof span, offsets.data(),
                offsets.size() * sizeof(std::uint64_t));
    FrameHeader answer;
    answer.type = FrameType::ReadResponse;
    answer.request_id = request.request_id;
    answer.flags = frame_flags::kCrossMemory | frame_flags::kMapped | frame_flags::kDescriptor;
    answer.length = payload.size();
    iovec parts[2] = {{&answer, sizeof answer}, {payload.data(), payload.size()}};
    send_passing(socket, parts, 2, {passed});
  };
}

TEST_F(BrokenOwnerAnswers, APieceThatLiesOutsideItsSpanIsRefusedBeforeAnyBlockIsCopied) {
  const SharedSpan span{7, kSize, 0, kSize};
  // The first block lies in the span; the second would end past it.
  EXPECT_EQ(read_pieces_through(passing_pieces_answer(span, {0, kSize / 2 + 4096}, good.get())),
            ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, ASpanThatDoesNotStartOnAPageIsRefused) {
  const SharedSpan span{7, kSize, 100, kSize / 2};
  EXPECT_EQ(read_pieces_through(passing_pieces_answer(span, {0, kSize / 4}, good.get())),
            ErrorCode::Protocol);
  EXPECT_EQ(target, untouched);
}

TEST_F(BrokenOwnerAnswers, AMappedPieceAnswerOfTheWrongLengthBreaksTheConnection) {
  const SharedSpan span{7, kSize, 0, kSize};
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

// The other way round: a peer that sends the owner a descriptor (here with its Hello) is
// refused, its connection closed, and the owner keeps no descriptor of it.
TEST_F(BrokenOwnerAnswers, AnOwnerRefusesAndClosesDescriptorsAPeerSends) {
  std::vector<std::byte> memory(4096);
  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  auto address = readable.metadata().endpoint().transports.at(0).address;
  ASSERT_TRUE(address.starts_with("@")) << address;
  const auto before = open_descriptors();
  // Whether the owner ends a connection whose Hello carries `gift` (none: -1) within `wait`.
  const auto ended_after_hello = [&](int gift, std::chrono::milliseconds wait) {
    auto socket = connect_unix(address.substr(1));
    FrameHeader hello;
    hello.type = FrameType::Hello;
    std::string name = "gift";
    hello.length = name.size();
    iovec parts[2] = {{&hello, sizeof hello}, {name.data(), name.size()}};
    send_passing(socket.get(), parts, 2, gift < 0 ? std::vector<int>{} : std::vector<int>{gift});
    pollfd ready{socket.get(), POLLIN, 0};
    char sink[256];
    for (const auto until = std::chrono::steady_clock::now() + wait;
         std::chrono::steady_clock::now() < until;) {
      if (poll_resumed(ready, 50ms) <= 0) continue;
      if (::recv(socket.get(), sink, sizeof sink, MSG_DONTWAIT) <= 0) return true;
    }
    return false;
  };
  EXPECT_FALSE(ended_after_hello(-1, 300ms)) << "the owner ends even a plain Hello's connection";
  EXPECT_TRUE(ended_after_hello(sealed_memfd(4096, kAllSeals).get(), 5s))
      << "the owner kept a connection that sent it a descriptor";
  for (int i = 0; i < 200 && open_descriptors() != before; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(open_descriptors(), before) << "the owner kept the peer's descriptor";
}
