#pragma once
// What the stream transports' listener does with a socket it accepted before it becomes a
// connection: who it counts against, and how it is refused.

#include <string>

namespace memwire::detail {

// Who a connection counts against: its process over a Unix socket (`process` != 0), else its IP
// address.
std::string peer_identity(int socket, int process);

// Refuses an accepted connection: a HelloResponse saying why, its unread bytes drained, and its
// writing half shut (the caller lets it linger before closing).
void refuse_connection(int socket, const std::string& why);

}  // namespace memwire::detail
