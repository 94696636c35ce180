#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memwire/export.hpp"

namespace memwire {

// Operations that ended with one status, on one transport, kind and side, and the bytes they
// covered (an errored or cancelled operation counts its full size: what it was to move).
struct MEMWIRE_API OperationCount {
  std::string transport;  // "tcp", "shm", "verbs"; "none" when it ended before one was chosen
  std::string kind;       // "read", "write"
  std::string side;       // "active" (began the read/write), "passive" (created the readable/...)
  std::string status;     // "complete", "cancelled", "error"
  std::string code;       // the ErrorCode of an error ("peer_lost", "timeout", ...); else empty
  std::uint64_t operations = 0;
  std::uint64_t bytes = 0;
};

// How long operations took, from creation to their final status, in fixed buckets.
struct MEMWIRE_API DurationHistogram {
  std::string transport, kind, side;
  std::vector<double> upper_bounds_seconds;  // ascending; the +Inf bucket is `count`
  std::vector<std::uint64_t> cumulative;     // operations at or below each bound
  std::uint64_t count = 0;
  double sum_seconds = 0;
};

struct MEMWIRE_API ConnectionCount {
  std::string transport;
  std::string direction;  // "outbound" (dialled), "inbound" (accepted)
  std::uint64_t open = 0;
  std::uint64_t opened = 0;  // since the connector started
};

// A point-in-time copy of a connector's counters (Connector::telemetry()). Series that never
// moved are left out, except connections per started transport and the registration gauges.
struct MEMWIRE_API TelemetrySnapshot {
  std::string connector;
  std::vector<OperationCount> operations;
  std::vector<DurationHistogram> durations;
  std::vector<ConnectionCount> connections;
  std::uint64_t registered_bytes = 0;  // memory remote peers may reach right now
  std::uint64_t registrations = 0;     // readable/writable operations created, ever
  // Accepted connections that ended in a remote access error, a flushed QP or garbage (a peer
  // using keys it was not granted), and connections refused because their source had too many.
  std::uint64_t peer_faults = 0;
  // Device memory registrations (ibv_reg_mr) made, ever: what registering once saves.
  std::uint64_t memory_regions = 0;
  std::uint64_t refused_connections = 0;
  // Requests for remote keys (verbs windows or regions) refused because the connector held
  // its limit of them (ConnectorOptions::rdma.max_remote_keys).
  std::uint64_t refused_grants = 0;
  // Tagged pool transfers peers hold open on this connector over tcp and shm (a record of up to
  // about 700 bytes each), and those refused because a limit on them was reached
  // (StreamOptions::max_open_transfers and its per connection, peer, user and shared forms).
  std::uint64_t peer_transfers_open = 0;
  std::uint64_t refused_transfers = 0;
};

// Prometheus text exposition (version 0.0.4): memwire_operations_total,
// memwire_transferred_bytes_total, memwire_operation_duration_seconds (histogram),
// memwire_registered_bytes, memwire_registrations_total, memwire_memory_regions_total,
// memwire_connections,
// memwire_connections_opened_total, memwire_peer_faults_total,
// memwire_refused_connections_total, memwire_refused_grants_total, memwire_peer_transfers_open,
// memwire_refused_transfers_total. Every family has its HELP and
// TYPE lines.
MEMWIRE_API std::string to_prometheus(const TelemetrySnapshot& snapshot);

}  // namespace memwire
