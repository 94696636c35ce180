#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace memwire::detail {

// Same host: requests travel on a Unix socket, and the passive side copies payload straight
// between its registration and the active process's buffer (process_vm_readv/writev): one
// copy, checked against the registration like every other access. Offered with the host's
// boot id; used only by peers of the same boot, and only after the owner checked the Hello at
// connect time (sent by the process that connected, which the kernel lets it reach; else the
// connector falls back to TCP).
std::unique_ptr<Transport> make_shm_transport(const TransportContext& context);

}  // namespace memwire::detail
