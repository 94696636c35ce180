#pragma once

#include <memory>

#include "transport/stream/same_host.hpp"

namespace memwire::detail {

// shm's parts of a stream connection (transport/stream/same_host.hpp): the owner's, which copies
// across processes and answers with SharedBuffer locations (shm_owner_side.cpp), and the
// peer's, which copies through its mappings of the owner's SharedBuffers (shm_peer_side.cpp).
// `direct_reads`: the peer may read our pools' blocks itself (ShmOptions::direct_reads, and the
// peer of our own user).
std::unique_ptr<SameHostOwner> make_shm_owner_side(int peer_process, bool direct_reads);
std::unique_ptr<SameHostPeer> make_shm_peer_side();

}  // namespace memwire::detail
