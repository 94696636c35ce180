#include "transport/stream/accepted_socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {

// Tells a refused peer why before closing, so that it fails with that reason and not with a
// bare "connection lost"; on the loop, so nothing here blocks.
void refuse_connection(int socket, const std::string& why) {
  OutFrame refusal;
  refusal.header.type = FrameType::HelloResponse;
  refusal.header.code = wire_code(ErrorCode::Transport);
  refusal.header.length = why.size();
  iovec parts[2] = {{&refusal.header, sizeof refusal.header},
                    {const_cast<char*>(why.data()), why.size()}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = 2;
  [[maybe_unused]] auto sent = ::sendmsg(socket, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  // Unread bytes (its Hello) would turn the close into a reset that may beat the refusal.
  char scratch[4096];
  while (::recv(socket, scratch, sizeof scratch, MSG_DONTWAIT) > 0) {
  }
  ::shutdown(socket, SHUT_WR);
}

// Who a connection counts against: its process over a Unix socket, else its IP address.
std::string peer_identity(int socket, int process) {
  if (process != 0) return "process " + std::to_string(process);
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(socket, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  if (address.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr, text, sizeof text);
  return text;
}

}  // namespace memwire::detail
