#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "file_descriptor.hpp"
#include "memwire/export.hpp"  // MEMWIRE_API: exported for tests, fuzzers and bench

namespace memwire::detail {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};
// "host:port"; throws Error{InvalidMetadata} when malformed.
MEMWIRE_API HostPort parse_host_port(std::string_view text);

// A listening TCP socket; throws Error{Transport} with the reason.
MEMWIRE_API FileDescriptor listen_tcp(const std::string& address, std::uint16_t port);
MEMWIRE_API std::uint16_t local_port(int fd);
// poll() on one descriptor for at most `timeout`, resumed after a signal (a profiler's, an
// interpreter's, libFuzzer's watchdog): an interrupted wait is neither an event nor a timeout.
// poll()'s result: > 0 ready (see `ready.revents`), 0 timed out, < 0 failed.
MEMWIRE_API int poll_resumed(pollfd& ready, std::chrono::milliseconds timeout);
// Connects within `timeout`; throws Error{PeerLost} when the peer cannot be reached.
MEMWIRE_API FileDescriptor connect_tcp(const HostPort& peer, std::chrono::milliseconds timeout);
// A listening Unix socket in the abstract namespace ("@name": no file to clean up).
MEMWIRE_API FileDescriptor listen_unix(const std::string& abstract_name);
MEMWIRE_API FileDescriptor connect_unix(const std::string& abstract_name);
// The process at the other end of a Unix socket, as the kernel vouches for it; 0 otherwise.
MEMWIRE_API int peer_process(int fd);

// Low latency and fast detection of dead peers on a data connection.
MEMWIRE_API void tune_data_socket(int fd);

// Blocking I/O that either moves every byte or reports the connection broken (false).
MEMWIRE_API bool send_all(int fd, iovec* parts, int count);
MEMWIRE_API bool receive_all(int fd, void* data, std::size_t length);
// Into many blocks in turn (scatter); advances `parts` as it goes.
MEMWIRE_API bool receive_all(int fd, iovec* parts, int count);
// Sends what the socket takes without blocking (at most IOV_MAX parts a call): the byte count, or
// -1 when it broke.
MEMWIRE_API long send_some(int fd, iovec* parts, int count);

}  // namespace memwire::detail
