#pragma once

#include <string_view>

namespace memwire::detail {

// A name that identifies a peer (a connector's, a grant's): 1 to Connector::kMaxTagBytes bytes,
// no NUL. Throws Error{InvalidArgument} naming what is wrong.
void check_peer_name(std::string_view name);
// The same, as a reason (empty when the name is fine), for names read off a socket.
std::string_view peer_name_problem(std::string_view name) noexcept;

}  // namespace memwire::detail
