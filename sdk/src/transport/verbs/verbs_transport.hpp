#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace memwire::detail {

// RDMA READ/WRITE over RC queue pairs (libibverbs + librdmacm). Throws Error{Transport} when
// this host has no RDMA device with an active port and a RoCE v2 IPv4 GID.
std::unique_ptr<Transport> make_verbs_transport(const TransportContext& context);

}  // namespace memwire::detail
