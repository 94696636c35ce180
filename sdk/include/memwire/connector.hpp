#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/metadata.hpp"
#include "memwire/operation.hpp"

namespace memwire {

struct ConnectorOptions {
  // Connector name; empty = a random uuid (32 hex digits, no dashes), as nixl_connect does.
  std::string name;
  // Where the TCP listener binds; port 0 = any free port.
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;
  // Transports this connector may use, best first; unknown or unavailable ones are skipped.
  std::vector<std::string> transports = {"verbs", "shm", "tcp"};
  // RDMA device name ("" = first with an active port) and GID index (-1 = RoCEv2 on IPv4).
  std::string rdma_device;
  int gid_index = -1;
  // How long handed-out metadata stays valid; zero = forever.
  std::chrono::milliseconds metadata_ttl = std::chrono::minutes(10);
  // Bytes per TCP request, and TCP connections per peer that one operation may spread over.
  std::size_t tcp_chunk_size = 4u << 20;
  unsigned tcp_connections_per_peer = 2;
  // Connect timeout; also bounds how long a stalled peer may hold a revoked registration.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  // Limits on connections other connectors open to this one (each costs two threads and a file
  // descriptor): in total, and per peer (per IP address over tcp, per process over shm). Over a
  // limit, or out of file descriptors, a new connection is closed at once. A connection that
  // sends no first frame within `handshake_timeout` is closed.
  unsigned max_connections = 512;
  unsigned max_connections_per_peer = 64;
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  // Where memwire says what it decided (transports skipped, fallbacks). Empty = silent.
  std::function<void(std::string_view)> log;

  // Applies the documented MEMWIRE_* environment overrides (MEMWIRE_TRANSPORTS=verbs,tcp,
  // MEMWIRE_BIND_ADDRESS, MEMWIRE_PORT, MEMWIRE_RDMA_DEVICE, MEMWIRE_GID_INDEX,
  // MEMWIRE_TCP_CHUNK_SIZE, MEMWIRE_TCP_CONNECTIONS, MEMWIRE_MAX_CONNECTIONS,
  // MEMWIRE_MAX_CONNECTIONS_PER_PEER, MEMWIRE_LOG=1 logs to stderr). The only place
  // memwire reads the environment; call it at your program's edge if you want them.
  static ConnectorOptions from_environment(ConnectorOptions defaults);
  static ConnectorOptions from_environment();
};

// One per worker: owns the transports' endpoints, one listener per transport, the table of
// live passive operations and pooled connections to peers.
class Connector {
 public:
  explicit Connector(ConnectorOptions options = {});
  ~Connector();
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  const std::string& name() const noexcept;
  const std::string& hostname() const noexcept;
  // Transports that started on this connector, best first.
  std::vector<std::string> transports() const;

  ReadableOperation create_readable(std::vector<Descriptor> local);
  WritableOperation create_writable(std::vector<Descriptor> local);
  ReadOperation begin_read(const RdmaMetadata& remote, std::vector<Descriptor> local);
  WriteOperation begin_write(std::vector<Descriptor> local, const RdmaMetadata& remote);

  friend bool operator==(const Connector& a, const Connector& b) { return a.name() == b.name(); }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memwire
