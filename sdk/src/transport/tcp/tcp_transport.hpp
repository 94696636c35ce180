#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace memwire::detail {

// The transport that always works: a framed protocol over pooled TCP connections.
std::unique_ptr<Transport> make_tcp_transport(const TransportContext& context);

}  // namespace memwire::detail
