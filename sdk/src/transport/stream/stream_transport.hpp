#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "transport/stream/same_host.hpp"
#include "transport/stream/socket.hpp"
#include "transport/transport.hpp"

namespace memwire::detail {

// What makes one stream transport differ from another: where it listens, how it dials, and
// whether payload crosses on the socket (tcp) or is copied between the processes (shm, whose
// `same_host` does it).
// A dial's outcome: a connected socket, or why this transport cannot reach that peer after all
// (`unusable`: the connector tries the next). A peer that is gone throws (PeerLost) instead.
struct Dialled {
  FileDescriptor socket;
  std::string unusable;
  // The owner's process, when its answer let us read its pools' blocks ourselves (shm's
  // kDirectReads); 0 otherwise.
  int direct_reads_from = 0;
};

struct StreamSettings {
  std::string name;
  FileDescriptor listener;
  TransportOffer offer;
  std::function<Dialled(const std::string& address, std::chrono::milliseconds timeout)> dial;
  std::function<bool(const TransportOffer&)> can_reach = [](const TransportOffer&) { return true; };
  // Cross-memory requests and mapped answers (transport/shm's); null: payload on the socket.
  std::shared_ptr<SameHost> same_host;
};

// A transport over the framed stream protocol: one listener, pooled connections per peer, all
// driven by one event loop thread, however many peers there are.
std::unique_ptr<Transport> make_stream_transport(const TransportContext& context,
                                                 StreamSettings settings);

}  // namespace memwire::detail
