#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "util/file_descriptor.hpp"

namespace memwire::detail {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};
// "host:port"; throws Error{InvalidMetadata} when malformed.
HostPort parse_host_port(std::string_view text);

// A listening TCP socket; throws Error{Transport} with the reason.
FileDescriptor listen_tcp(const std::string& address, std::uint16_t port);
std::uint16_t local_port(int fd);
// poll() on one descriptor for at most `timeout`, resumed after a signal (a profiler's, an
// interpreter's, libFuzzer's watchdog): an interrupted wait is neither an event nor a timeout.
// poll()'s result: > 0 ready (see `ready.revents`), 0 timed out, < 0 failed.
int poll_resumed(pollfd& ready, std::chrono::milliseconds timeout);
// Connects within `timeout`; throws Error{PeerLost} when the peer cannot be reached.
FileDescriptor connect_tcp(const HostPort& peer, std::chrono::milliseconds timeout);
// A listening Unix socket in the abstract namespace ("@name": no file to clean up).
FileDescriptor listen_unix(const std::string& abstract_name);
FileDescriptor connect_unix(const std::string& abstract_name);
// The process at the other end of a Unix socket, as the kernel vouches for it; 0 otherwise.
int peer_process(int fd);
// Its process and user, as the kernel vouches for them; nullopt on other sockets.
struct PeerCredentials {
  int pid = 0;
  uid_t uid = 0;
};
std::optional<PeerCredentials> peer_credentials(int fd);

// Low latency and fast detection of dead peers on a data connection.
void tune_data_socket(int fd);

// Blocking I/O that either moves every byte or reports the connection broken (false).
bool send_all(int fd, iovec* parts, int count);
// The same on a Unix socket, the first bytes with this process's credentials (SCM_CREDENTIALS:
// the kernel refuses a pid, uid or gid that is not the sender's), for a reader that asks for
// them (pass_credentials) to know which process sent them.
bool send_all_as_this_process(int fd, iovec* parts, int count);
// Whether reads of a Unix socket bring the credentials of the process that sent their bytes
// (SO_PASSCRED); the kernel then never joins the bytes of two senders in one read.
void pass_credentials(int fd, bool pass);
bool receive_all(int fd, void* data, std::size_t length);
// Into many blocks in turn (scatter); advances `parts` as it goes.
bool receive_all(int fd, iovec* parts, int count);
// Sends what the socket takes without blocking (at most IOV_MAX parts a call): the byte count, or
// -1 when it broke. `passed` (a Unix socket's, >= 0) goes with the first byte (SCM_RIGHTS) if
// any byte goes.
long send_some(int fd, iovec* parts, int count, int passed = -1);
// The most descriptors one message may carry (a mapped answer carries one), and the control
// space recvmsg sets aside for them: more is a truncated message, refused.
inline constexpr std::size_t kMostPassedPerMessage = 1;

}  // namespace memwire::detail
