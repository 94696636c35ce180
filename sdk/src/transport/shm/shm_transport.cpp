#include "transport/shm/shm_transport.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "memwire/error.hpp"
#include "transport/shm/cross_memory.hpp"
#include "transport/shm/shm_sides.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/stream_transport.hpp"
#include "util/ids.hpp"

namespace memwire::detail {
namespace {

std::string boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  if (id.empty())
    throw Error(ErrorCode::Transport, "no boot id: cannot tell which peers share this host");
  return id;
}

// Connects and proves to the owner that we are the process that connected: the Hello goes with
// our credentials, which the kernel checks (nothing of ours need be read to prove it). The
// Hello also names our connector, which the peer's pools report as a tag's sender.
Dialled dial_and_hello(const std::string& address, std::chrono::milliseconds timeout,
                       const std::string& connector) {
  if (address.size() < 2 || address.front() != '@')
    throw Error(ErrorCode::InvalidMetadata, "shm address '" + address + "' is not @name");
  FileDescriptor socket;
  try {
    socket = connect_unix(address.substr(1));
  } catch (const Error& error) {
    return {{}, error.what()};  // another namespace, say: the connector falls back
  }
  FrameHeader hello;
  hello.type = FrameType::Hello;
  hello.flags = frame_flags::kCrossMemory;
  const auto name = connector.substr(0, FrameHeader::kMaxText);
  hello.length = name.size();
  // Bounded: a peer that accepts but never answers must not hang us.
  timeval limit{static_cast<time_t>(timeout.count() / 1000),
                static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  iovec parts[2] = {{&hello, sizeof hello}, {const_cast<char*>(name.data()), name.size()}};
  FrameHeader answer;
  if (!send_all_as_this_process(socket.get(), parts, 2) ||
      !receive_all(socket.get(), &answer, sizeof answer) ||
      answer.type != FrameType::HelloResponse || answer.length > FrameHeader::kMaxText)
    return {{}, "shm peer at " + address + " did not answer the Hello"};
  if (answer.code != 0) {
    std::string reason(answer.length, '\0');
    receive_all(socket.get(), reason.data(), reason.size());
    return {{}, "shm peer at " + address + " refused: " + reason};
  }
  timeval forever{};
  ::setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
  // Whom we would read is the process the kernel says listens there, not what it says.
  const int owner = (answer.flags & frame_flags::kDirectReads) ? peer_process(socket.get()) : 0;
  return {std::move(socket), {}, owner};
}

// Each connection's shm part: the owner's copies and mapped answers, the peer's mapped copies.
class ShmSameHost final : public SameHost {
 public:
  explicit ShmSameHost(bool direct_reads) : direct_reads_(direct_reads) {}
  std::unique_ptr<SameHostOwner> owner(int peer_process, uid_t peer_user) override {
    // Only for our own user: the kernel would let no other read us anyway (ptrace rules).
    return make_shm_owner_side(peer_process, direct_reads_ && peer_user == ::geteuid());
  }
  std::unique_ptr<SameHostPeer> peer() override { return make_shm_peer_side(); }
  int read_directly(int process, std::span<const iovec> theirs,
                    std::span<const iovec> ours) override {
    // One range: on two CPUs when large, as the owner's own copies.
    const auto failure =
        theirs.size() == 1 && ours.size() == 1
            ? copy_from_process(process, reinterpret_cast<std::uintptr_t>(theirs[0].iov_base),
                                static_cast<std::byte*>(ours[0].iov_base), ours[0].iov_len)
            : copy_from_process(process, theirs, ours);
    return failure ? failure->error : 0;
  }

 private:
  const bool direct_reads_;
};

}  // namespace

std::unique_ptr<Transport> make_shm_transport(const TransportContext& context) {
  StreamSettings settings;
  settings.name = "shm";
  const auto name = "memwire-shm-" + to_hex(random_id());
  settings.listener = listen_unix(name);
  const auto host = boot_id();
  settings.offer = {"shm", "@" + name, {}, {{"boot_id", host}}};
  settings.dial = [connector = context.connector_name](const std::string& address,
                                                       std::chrono::milliseconds timeout) {
    return dial_and_hello(address, timeout, connector);
  };
  settings.can_reach = [host](const TransportOffer& offer) {
    auto it = offer.attributes.find("boot_id");
    return it != offer.attributes.end() && it->second == host;
  };
  settings.same_host = std::make_shared<ShmSameHost>(context.options.shm.direct_reads);
  return make_stream_transport(context, std::move(settings));
}

}  // namespace memwire::detail
