#include "transport/stream/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>

#include "memwire/error.hpp"

namespace memwire::detail {

HostPort parse_host_port(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size())
    throw Error(ErrorCode::InvalidMetadata, "address '" + std::string(text) + "' is not host:port");
  unsigned port = 0;
  auto digits = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || port == 0 || port > 65535)
    throw Error(ErrorCode::InvalidMetadata, "address '" + std::string(text) + "' has a bad port");
  return {std::string(text.substr(0, colon)), static_cast<std::uint16_t>(port)};
}

namespace {

sockaddr_in resolve_ipv4(const std::string& host, std::uint16_t port, ErrorCode code) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) == 1) return address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    throw Error(code, "cannot resolve host '" + host + "'");
  address.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return address;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

FileDescriptor listen_tcp(const std::string& host, std::uint16_t port) {
  auto address = resolve_ipv4(host, port, ErrorCode::Transport);
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(ErrorCode::Transport, errno_text("socket"));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    throw Error(ErrorCode::Transport,
                errno_text(("bind " + host + ":" + std::to_string(port)).c_str()));
  if (::listen(fd.get(), 512) != 0) throw Error(ErrorCode::Transport, errno_text("listen"));
  return fd;
}

std::uint16_t local_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

int poll_resumed(pollfd& ready, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int result = ::poll(&ready, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (result >= 0 || errno != EINTR) return result;
  }
}

FileDescriptor connect_tcp(const HostPort& peer, std::chrono::milliseconds timeout) {
  auto address = resolve_ipv4(peer.host, peer.port, ErrorCode::PeerLost);
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw Error(ErrorCode::Transport, errno_text("socket"));
  const auto where = " " + peer.to_string();
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    if (errno != EINPROGRESS)
      throw Error(ErrorCode::PeerLost, errno_text(("connect" + where).c_str()));
    pollfd waiting{fd.get(), POLLOUT, 0};
    const int ready = poll_resumed(waiting, timeout);
    if (ready == 0) throw Error(ErrorCode::PeerLost, "connect" + where + ": timed out");
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (ready < 0 || error != 0) {
      errno = ready < 0 ? errno : error;
      throw Error(ErrorCode::PeerLost, errno_text(("connect" + where).c_str()));
    }
  }
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

namespace {

sockaddr_un abstract_address(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof address.sun_path)
    throw Error(ErrorCode::InvalidMetadata, "unix socket name too long");
  // sun_path[0] == '\0' marks the abstract namespace.
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

// An AF_UNIX stream socket that `attach` (::bind or ::connect) gave the abstract address of
// `name`; Error{failure} ("<what> @<name>: <errno text>") when it could not.
FileDescriptor unix_socket(const std::string& name, int (*attach)(int, const sockaddr*, socklen_t),
                           ErrorCode failure, const std::string& what) {
  socklen_t length = 0;
  auto address = abstract_address(name, length);
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(ErrorCode::Transport, errno_text("socket"));
  if (attach(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0)
    throw Error(failure, errno_text((what + " @" + name).c_str()));
  return fd;
}

}  // namespace

FileDescriptor listen_unix(const std::string& name) {
  auto fd = unix_socket(name, ::bind, ErrorCode::Transport, "bind");
  if (::listen(fd.get(), 512) != 0) throw Error(ErrorCode::Transport, errno_text("listen"));
  return fd;
}

FileDescriptor connect_unix(const std::string& name) {
  return unix_socket(name, ::connect, ErrorCode::PeerLost, "connect");
}

int peer_process(int fd) {
  const auto credentials = peer_credentials(fd);
  return credentials ? credentials->pid : 0;
}

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  // A TCP socket answers too, with pid 0 (no process vouched for).
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 || credentials.pid == 0)
    return std::nullopt;
  return PeerCredentials{credentials.pid, credentials.uid};
}

void tune_data_socket(int fd) {
  int one = 1, idle = 5, interval = 1, probes = 3;
  unsigned user_timeout_ms = 10000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

namespace {

// Moves past `bytes` already sent or received: whole parts dropped, the next one trimmed.
void advance(iovec*& parts, int& count, std::size_t bytes) {
  while (count > 0 && bytes >= parts->iov_len) {
    bytes -= parts->iov_len;
    ++parts;
    --count;
  }
  if (count > 0) {
    parts->iov_base = static_cast<char*>(parts->iov_base) + bytes;
    parts->iov_len -= bytes;
  }
}

}  // namespace

bool send_all(int fd, iovec* parts, int count) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(std::min(count, IOV_MAX));
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    advance(parts, count, static_cast<std::size_t>(sent));
  }
  return true;
}

namespace {

// A message of `parts` (at most IOV_MAX of them) with one control message of `type` carrying
// `data`, in `control` (which outlives the message and holds CMSG_SPACE(sizeof data)).
template <typename Data>
msghdr message_with(iovec* parts, int count, int type, const Data& data, std::span<char> control) {
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = static_cast<std::size_t>(std::min(count, IOV_MAX));
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  auto* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = type;
  header->cmsg_len = CMSG_LEN(sizeof data);
  std::memcpy(CMSG_DATA(header), &data, sizeof data);
  return message;
}

}  // namespace

bool send_all_as_this_process(int fd, iovec* parts, int count) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))] = {};
  const ucred ours{::getpid(), ::getuid(), ::getgid()};
  auto message = message_with(parts, count, SCM_CREDENTIALS, ours, control);
  for (;;) {
    const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return false;
    advance(parts, count, static_cast<std::size_t>(sent));
    return send_all(fd, parts, count);  // the rest: still ours, as the kernel records it
  }
}

void pass_credentials(int fd, bool pass) {
  const int on = pass ? 1 : 0;
  ::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
}

long send_some(int fd, iovec* parts, int count, int passed) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  auto message = message_with(parts, count, SCM_RIGHTS, passed, control);
  if (passed < 0) {
    message.msg_control = nullptr;
    message.msg_controllen = 0;
  }
  for (;;) {
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) return sent;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
}

bool receive_all(int fd, void* data, std::size_t length) {
  auto* cursor = static_cast<char*>(data);
  while (length > 0) {
    ssize_t received = ::recv(fd, cursor, length, MSG_WAITALL);
    if (received < 0 && errno == EINTR) continue;
    if (received <= 0) return false;
    cursor += received;
    length -= static_cast<std::size_t>(received);
  }
  return true;
}

bool receive_all(int fd, iovec* parts, int count) {
  while (count > 0 && parts->iov_len == 0) ++parts, --count;
  while (count > 0) {
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(std::min(count, IOV_MAX));
    ssize_t received = ::recvmsg(fd, &message, MSG_WAITALL);
    if (received < 0 && errno == EINTR) continue;
    if (received <= 0) return false;
    advance(parts, count, static_cast<std::size_t>(received));
  }
  return true;
}

}  // namespace memwire::detail
