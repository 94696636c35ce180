#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace memwire::detail::verbs {

// "a.b.c.d:port" <-> sockaddr_in: how the verbs offer names the owner's rdma_cm listener.
std::optional<sockaddr_in> parse_ipv4_endpoint(std::string_view text);
std::string format_endpoint(const sockaddr* address);

}  // namespace memwire::detail::verbs
