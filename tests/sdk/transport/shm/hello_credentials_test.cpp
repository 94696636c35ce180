// An shm peer proves with its Hello that it is the process that connected: the kernel says which
// process sent the Hello's bytes (SCM_CREDENTIALS), and the owner touches none of the peer's
// memory for it. Before (70a038f to 8fdd1aa) the owner read a probe word at an address the
// Hello named, on its event loop: a peer whose memory stalls that read (pages registered with
// userfaultfd, filled only when it likes) froze the loop for every peer, with no token at all
// (issue 51).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memwire/memwire.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/file_descriptor.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kStalledPages = 8;

std::string shm_address(const Endpoint& endpoint) {
  for (const auto& offer : endpoint.transports)
    if (offer.name == "shm") return offer.address;
  return {};
}

ConnectorOptions shm_only(const std::string& name) {
  ConnectorOptions options;
  options.name = name;
  options.transports = {"shm"};
  options.stream.io_threads = 2;
  return options;
}

// A cross-memory Hello naming `address` (an owner of an earlier release read a word there).
bool send_hello(int socket, std::uint64_t address) {
  const std::string name = "attacker";
  FrameHeader hello;
  hello.type = FrameType::Hello;
  hello.flags = frame_flags::kCrossMemory;
  hello.request_id = 1;
  hello.offset = 0x6d656d7769726521;
  hello.peer_address = address;
  hello.length = name.size();
  iovec parts[2] = {{&hello, sizeof hello}, {const_cast<char*>(name.data()), name.size()}};
  return send_all_as_this_process(socket, parts, 2);
}

// The owner's answer to a Hello: its code (0: accepted) and text; nullopt when none came.
std::optional<std::pair<std::uint8_t, std::string>> hello_answer(int socket) {
  pollfd ready{socket, POLLIN, 0};
  if (poll_resumed(ready, 5s) <= 0) return std::nullopt;
  FrameHeader answer;
  if (!receive_all(socket, &answer, sizeof answer) || answer.type != FrameType::HelloResponse ||
      answer.length > FrameHeader::kMaxText)
    return std::nullopt;
  std::string text(answer.length, '\0');
  if (!receive_all(socket, text.data(), text.size())) return std::nullopt;
  return std::pair{answer.code, text};
}

// A forked process whose kStalledPages pages are registered with userfaultfd and never filled
// until it exits: whoever copies from them (the kernel's copies included) waits. Forked before
// any connector exists; it connects to the address it is sent, says Hello `hellos` times naming
// its pages, and reports each answer's code ('a' accepted, 'r' refused, 'n' none) and whether a
// copy ever faulted on its pages ('f').
class StalledPeer {
 public:
  explicit StalledPeer(int hellos) {
    int commands[2], reports[2];
    if (::pipe2(commands, O_CLOEXEC) != 0 || ::pipe2(reports, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe");
    process_ = ::fork();
    if (process_ == 0) {
      ::close(commands[1]);
      ::close(reports[0]);
      serve(commands[0], reports[1], hellos);
      ::_exit(0);
    }
    ::close(commands[0]);
    ::close(reports[1]);
    commands_ = commands[1];
    reports_ = reports[0];
    available_ = report(5s) == 'u';
  }
  ~StalledPeer() {
    ::kill(process_, SIGKILL);
    ::waitpid(process_, nullptr, 0);
    ::close(commands_);
    ::close(reports_);
  }
  StalledPeer(const StalledPeer&) = delete;
  StalledPeer& operator=(const StalledPeer&) = delete;

  bool available() const { return available_; }
  // Sends the owner's shm address ("@name"): the peer connects and says its Hellos.
  void greet(const std::string& address) {
    const std::string line = address + "\n";
    [[maybe_unused]] auto sent = ::write(commands_, line.data(), line.size());
  }
  // The next report, or 0 when none came within `within`.
  char report(std::chrono::milliseconds within) {
    pollfd ready{reports_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(within.count())) <= 0) return 0;
    char what = 0;
    return ::read(reports_, &what, 1) == 1 ? what : 0;
  }

 private:
  void serve(int commands, int reports, int hellos) {
    auto tell = [reports](char what) { [[maybe_unused]] auto told = ::write(reports, &what, 1); };
    auto* pages =
        static_cast<std::byte*>(::mmap(nullptr, kStalledPages * kPage, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    const int uffd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    uffdio_api api{};
    api.api = UFFD_API;
    uffdio_register range{};
    range.range.start = reinterpret_cast<std::uintptr_t>(pages);
    range.range.len = kStalledPages * kPage;
    range.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (pages == MAP_FAILED || uffd < 0 || ::ioctl(uffd, UFFDIO_API, &api) != 0 ||
        ::ioctl(uffd, UFFDIO_REGISTER, &range) != 0)
      return tell('x');
    tell('u');
    std::string address;
    for (char c = 0; ::read(commands, &c, 1) == 1 && c != '\n';) address += c;
    std::vector<FileDescriptor> open;  // held until the process ends
    for (int i = 0; i < hellos; ++i) {
      try {
        open.push_back(connect_unix(address.substr(1)));
      } catch (const Error&) {
        tell('n');
        continue;
      }
      const int socket = open.back().get();
      const auto page = static_cast<std::size_t>(i) % kStalledPages;
      if (!send_hello(socket, range.range.start + page * kPage)) {
        tell('n');
        continue;
      }
      // Answered, or (an owner that reads the pages) a copy waiting on them.
      pollfd events[2] = {{socket, POLLIN, 0}, {uffd, POLLIN, 0}};
      if (::poll(events, 2, 2000) <= 0) {
        tell('n');
      } else if (events[1].revents & POLLIN) {
        tell('f');
      } else {
        FrameHeader answer;
        tell(receive_all(socket, &answer, sizeof answer) && answer.code == 0 ? 'a' : 'r');
      }
    }
    tell('d');
    for (char c = 0; ::read(commands, &c, 1) == 1;) {
    }
  }

  pid_t process_ = -1;
  int commands_ = -1;
  int reports_ = -1;
  bool available_ = false;
};

}  // namespace

// Four Hellos naming pages that stall whoever copies from them: each is answered, none of the
// pages is touched, and an honest reader is served at once meanwhile.
TEST(HelloCredentials, AHelloNamingStalledMemoryTouchesNoneOfIt) {
  constexpr int kHellos = 4;
  StalledPeer attacker(kHellos);  // forked before any connector's threads exist
  if (!attacker.available())
    GTEST_SKIP() << "userfaultfd for the kernel's faults is not allowed here (needs root or "
                    "vm.unprivileged_userfaultfd=1)";
  Connector owner(shm_only("owner"));
  std::vector<std::byte> source(64 * 1024, std::byte{7}), target(source.size());
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto address = shm_address(readable.metadata().endpoint());
  ASSERT_FALSE(address.empty());
  attacker.greet(address);
  std::string reports;
  for (char report = 0; (report = attacker.report(10s)) != 0 && report != 'd';) reports += report;
  EXPECT_EQ(reports, std::string(kHellos, 'a'))
      << "each Hello accepted without a copy from its pages ('f': a copy faulted on them)";

  Connector reader(shm_only("reader"));
  const auto started = std::chrono::steady_clock::now();
  auto status = OperationStatus::Uninitialized;
  std::string failure;
  try {
    auto read = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
    status = read.wait_for_completion(4s);
  } catch (const Error& error) {
    failure = error.what();
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  std::printf("honest read after 4 stalled-memory Hellos: %lld ms\n",
              static_cast<long long>(took.count()));
  EXPECT_EQ(failure, "");
  EXPECT_EQ(status, OperationStatus::Complete);
  EXPECT_LT(took, 1s);
  EXPECT_EQ(target, source);
}

// The process that connected is the one whose memory the owner would copy: a Hello whose bytes
// another process sent (a child handed the socket) is refused, and says why.
TEST(HelloCredentials, AHelloFromAnotherProcessThanTheOneThatConnectedIsRefused) {
  Connector owner(shm_only("owner"));
  std::vector<std::byte> source(4096, std::byte{1});
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto address = shm_address(readable.metadata().endpoint());
  ASSERT_FALSE(address.empty());

  auto connected = connect_unix(address.substr(1));  // by this process
  const pid_t child = ::fork();
  if (child == 0) ::_exit(send_hello(connected.get(), 0) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not send";
  const auto answer = hello_answer(connected.get());
  ASSERT_TRUE(answer) << "no answer to the Hello";
  EXPECT_EQ(answer->first, wire_code(ErrorCode::AccessDenied)) << answer->second;
  EXPECT_NE(answer->second.find("not by " + std::to_string(::getpid())), std::string::npos)
      << answer->second;

  // The same Hello from this process is accepted.
  auto ours = connect_unix(address.substr(1));
  ASSERT_TRUE(send_hello(ours.get(), 0));
  const auto accepted = hello_answer(ours.get());
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->first, 0) << accepted->second;
}

// Every cross-memory act rests on the Hello's check: a connection whose Hello did not ask for
// cross-memory copies (so the owner checked no sender) gets none, whoever sends the request
// (here a child on its parent's socket, whose memory the owner would have written).
TEST(HelloCredentials, NoCrossMemoryCopyWithoutACheckedHello) {
  Connector owner(shm_only("owner"));
  std::vector<std::byte> source(4096, std::byte{1});
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  const auto address = shm_address(metadata.endpoint());
  ASSERT_FALSE(address.empty());
  auto connected = connect_unix(address.substr(1));
  const std::string name = "plain";
  FrameHeader hello;
  hello.type = FrameType::Hello;
  hello.length = name.size();
  iovec parts[2] = {{&hello, sizeof hello}, {const_cast<char*>(name.data()), name.size()}};
  ASSERT_TRUE(send_all(connected.get(), parts, 2));  // no kCrossMemory: nothing checked, no answer

  std::vector<std::byte> landing(16, std::byte{0xee});
  FrameHeader read;
  read.type = FrameType::ReadRequest;
  read.flags = frame_flags::kCrossMemory;
  read.request_id = 42;
  read.length = landing.size();
  read.key = *parse_id(metadata.notification_key());
  read.token = *parse_id(metadata.token());
  read.peer_address = reinterpret_cast<std::uintptr_t>(landing.data());
  iovec request{&read, sizeof read};
  ASSERT_TRUE(send_all(connected.get(), &request, 1));
  FrameHeader answer;
  ASSERT_TRUE(receive_all(connected.get(), &answer, sizeof answer));
  EXPECT_EQ(answer.code, wire_code(ErrorCode::Protocol));
  EXPECT_EQ(landing, std::vector<std::byte>(16, std::byte{0xee})) << "the owner wrote into us";
}
