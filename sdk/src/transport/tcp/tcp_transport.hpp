#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace memwire::detail {

// The transport that always works: the framed stream protocol over pooled TCP connections,
// payload on the socket, straight between it and registered memory.
std::unique_ptr<Transport> make_tcp_transport(const TransportContext& context);

}  // namespace memwire::detail
