#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/export.hpp"
#include "memwire/log_level.hpp"

namespace memwire {

// The RDMA verbs transport's settings. Its devices (rails): every one in `devices`, or, when
// the list is empty, `device` alone if set, else every device with an active port. GID index
// -1 = RoCEv2 on IPv4. A transfer larger than `slice_size` is cut into slices of that size
// spread over the rails both ends share; a smaller one goes on one rail. When a rail fails,
// its unfinished slices move to the rails left.
//
// Access: a peer gets remote keys for a readable or writable only after presenting its token,
// and they work from that peer's queue pair alone (the NIC enforces it). `access` says how:
// "windows" (type-2 memory windows bound to the peer's QP), "connection_pd" (the memory
// registered in a protection domain of the peer's connection alone: for devices without
// type-2 windows; a PD per accepted connection and a registration per operation begun),
// "auto" (windows where the device has them). An accepted connection that ends in a remote
// access error, a flushed QP or garbage is a fault of its source address: a source with
// `max_access_faults` of them within `access_fault_window` is refused until the oldest
// leaves the window (0 = never refused).
//
// `max_remote_keys` caps the remote keys (memory windows, or regions in a connection's own
// protection domain) this connector holds for all its peers at once, pools included: one per
// non-empty descriptor or pool region granted to a connection. A Begin past it is refused
// with Error{Transport} naming the limit (memwire_refused_grants_total counts them); keys come
// back as operations end and connections close. 0 = no cap. Default 262,144 (four connections'
// worth of the 65,536 one connection may hold for one-shot operations); the device's own limit
// (ibv_devinfo -v: max_mw, max_mr) applies as well.
struct MEMWIRE_API RdmaOptions {
  std::vector<std::string> devices;
  std::string device;
  int gid_index = -1;
  std::size_t slice_size = 1u << 20;
  std::string access = "auto";
  unsigned max_access_faults = 8;
  std::chrono::milliseconds access_fault_window = std::chrono::seconds(60);
  std::size_t max_remote_keys = 262144;
};

// The TCP transport's settings: bytes per request, and connections per peer that one
// operation may spread over.
struct MEMWIRE_API TcpOptions {
  std::size_t chunk_size = 4u << 20;
  unsigned connections_per_peer = 2;
};

// What the stream transports (tcp and shm) share: their event loops and the accepted connections
// they serve. `io_threads`: each stream transport's event-loop threads, which all its connections
// share: 0 = half the CPUs, 1 to 8 (at most 64); more copy many peers' bytes on more CPUs. An
// accepted connection that sends no first frame within `handshake_timeout` is closed. What
// answers (error texts, frame bookkeeping; never the registered bytes themselves) may wait queued
// on one accepted connection for a peer that reads them slowly: `max_queued_answer_bytes`; over
// it, that connection reads no more requests until the peer has taken enough of them. An
// accepted connection silent for `idle_timeout` after its first frame, with nothing in progress
// on it, is closed (0 = never); a connector closes its own pooled connections to a peer after
// half of it idle, so that it never sends on one the peer is closing.
// Tagged pool transfers other connectors may hold open on this one: each keeps a record here (up
// to about 700 bytes: its tag, the peer's name and token) until its last step or its
// connection's end. At most `max_open_transfers_per_connection` per accepted connection and
// `max_open_transfers` in total (about 45 MiB at the default). A peer under a pool's shared
// token (or none) counts `..._per_peer` per peer (a process over shm, an IP address over tcp,
// whatever its connections), `..._per_user` per user over shm (the uid the kernel vouches for,
// shared by all of that user's processes), and all such peers together at most
// `max_open_shared_transfers`: the rest of the total is kept for granted peers (a token of
// metadata_for or Pool::grant), so that a flood under the shared token from any number of
// addresses never refuses a granted transfer (none is kept when it is not below the total). A
// granted peer counts `..._per_peer` by the name its grant gives it, wherever it connects from.
// A request that would open one more is refused with Error{Transport} naming the limit, its
// transfer fails, and the connection stays open; the counts go back as transfers end and
// connections close. 0 refuses every tagged transfer.
// Accepted connections (tcp and shm) have a standing: Hello-only until a request of theirs is
// admitted (its token accepted), then shared (one-shot operations' tokens and pools' shared
// token) or granted (a grant's token, for good). At most `max_hello_only_connections` stay
// Hello-only past their first second (a burst of peers dialling at once has its round trip):
// one more closes the oldest; so does one more of a peer's own, per IP or process, over
// max_connections_per_peer (its oldest past that second, else the new one is refused), and one
// more over max_connections (whatever its age). Idle connections, from however
// many addresses, never lock a new peer out; one still Hello-only after `hello_only_timeout` is
// closed, and a connector retires its own pooled connections that carried no request after half of
// it. At most `max_shared_connections` are shared (and max_connections_per_peer of one peer's): a
// request that would make one more is refused with Error{Transport} naming the limit, and its
// connection stays Hello-only. Granted connections are limited by max_connections alone, so
// the rest of it is theirs. Keep both below max_connections.
// `busy_poll`: after a peer's small request (up to 64 KiB) that came alone (the peer waits for
// each answer before it asks again) on an accepted connection, the loop that served it keeps
// polling for this long before it sleeps, so that the peer's next request is answered without
// that thread being woken: a 4 KiB READ's round trip about 10-35% shorter on 2 vCPUs. The cost
// is CPU: up to this much after each such request; an idle connector spends nothing. On 2 CPUs
// a peer with many small READs in flight loses some (its requests often come one by one
// there; 64 x 4 KiB over shm 0.84-0.90x), since the polling loop holds a CPU it would use.
// Zero: sleep at once; at most 10 ms.
struct MEMWIRE_API StreamOptions {
  unsigned io_threads = 0;
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  std::size_t max_queued_answer_bytes = 1u << 20;
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  std::chrono::microseconds busy_poll = std::chrono::microseconds(50);
  unsigned max_open_transfers_per_connection = 4096;
  unsigned max_open_transfers_per_peer = 8192;
  unsigned max_open_transfers_per_user = 16384;
  unsigned max_open_transfers = 65536;
  unsigned max_open_shared_transfers = 16384;
  unsigned max_hello_only_connections = 64;
  std::chrono::milliseconds hello_only_timeout = std::chrono::seconds(30);
  unsigned max_shared_connections = 384;
};

// The same-host transport's settings. `direct_reads`: this connector's peers of the same user
// (the uid the kernel vouches for on their Unix socket) may read its pools' blocks themselves,
// with process_vm_readv, instead of asking it: no round trip, no thread of ours woken. It exposes
// no more than the kernel already lets a process of the same user read (this whole process's
// memory, unless it made itself undumpable), but memwire then checks nothing on such a READ:
// not the pool's generation (a READ through metadata of a pool closed or registered again
// reads what that memory holds then, or fails where it is unmapped), not the queue budgets,
// and the owner hears nothing of it. Tagged READs, READs under a request grant and every WRITE
// still ask the owner, who admits and fences them as always. Off by default.
struct MEMWIRE_API ShmOptions {
  bool direct_reads = false;
};

// How a Connector is set up. Apart from connector.hpp so that the transports, which read these
// options, need not include the facade.
struct MEMWIRE_API ConnectorOptions {
  // Connector name; empty = a random uuid (32 hex digits, no dashes), as nixl_connect does.
  std::string name;
  // Where the TCP listener binds; port 0 = any free port.
  std::string bind_address = "127.0.0.1";
  std::uint16_t port = 0;
  // The TCP address peers are told to dial, "host" (with the listener's port) or "host:port":
  // for NAT or a port-mapped container. Empty = the bind address, or the host's name when
  // that is 0.0.0.0.
  std::string advertise_address;
  // Transports this connector may use, best first; unknown or unavailable ones are skipped.
  std::vector<std::string> transports = {"verbs", "shm", "tcp"};
  // Per transport.
  RdmaOptions rdma;
  TcpOptions tcp;
  StreamOptions stream;  // tcp's and shm's
  ShmOptions shm;
  // How long handed-out metadata stays valid; zero = forever.
  std::chrono::milliseconds metadata_ttl = std::chrono::minutes(10);
  // Connect timeout; also bounds how long a stalled peer may hold a revoked registration.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  // Limits on connections other connectors open to this one, on every transport: in total, and
  // per peer (per IP address over tcp and verbs, per process over shm). Over a limit, or out of
  // file descriptors, a new connection is closed at once; over tcp and shm, a Hello-only one is
  // closed instead when there is one, and granted connections count in the total alone
  // (StreamOptions: standings).
  unsigned max_connections = 512;
  unsigned max_connections_per_peer = 64;
  // CUDA memory moves through pinned host stand-ins, one per descriptor, held while its
  // operation lives: at most this many bytes of them at once per connector. An operation that
  // would pass it is refused (Error{Transport}).
  std::uint64_t cuda_staging_limit = std::uint64_t{4} << 30;
  // Where memwire says what it decided and what failed: one JSON object per call (no newline),
  // {"ts","level","event","msg","connector"[,"peer","transport","key","code",...]}, for each
  // event at or above `log_level`. Empty = silent. Called on memwire's threads: keep it short.
  std::function<void(std::string_view)> log;
  LogLevel log_level = LogLevel::Info;
  // Counters and the duration histogram behind Connector::telemetry(); off = all stay zero.
  bool telemetry = true;

  // Applies the documented MEMWIRE_* environment overrides (MEMWIRE_TRANSPORTS=verbs,tcp,
  // MEMWIRE_BIND_ADDRESS, MEMWIRE_ADVERTISE_ADDRESS, MEMWIRE_PORT, MEMWIRE_RDMA_DEVICE,
  // MEMWIRE_RDMA_DEVICES=rxe0,rxe1, MEMWIRE_RDMA_SLICE_SIZE,
  // MEMWIRE_RDMA_ACCESS=auto|windows|connection_pd, MEMWIRE_RDMA_MAX_ACCESS_FAULTS,
  // MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS, MEMWIRE_GID_INDEX, MEMWIRE_TCP_CHUNK_SIZE,
  // MEMWIRE_TCP_CONNECTIONS, MEMWIRE_MAX_CONNECTIONS, MEMWIRE_MAX_CONNECTIONS_PER_PEER,
  // MEMWIRE_MAX_QUEUED_ANSWER_BYTES, MEMWIRE_MAX_OPEN_TRANSFERS (and _PER_CONNECTION, _PER_PEER,
  // _PER_USER), MEMWIRE_MAX_OPEN_SHARED_TRANSFERS, MEMWIRE_MAX_SHARED_CONNECTIONS,
  // MEMWIRE_MAX_HELLO_ONLY_CONNECTIONS, MEMWIRE_HELLO_ONLY_TIMEOUT_MS, MEMWIRE_IDLE_TIMEOUT_MS,
  // MEMWIRE_SHM_DIRECT_READS=1, MEMWIRE_LOG=1 logs JSON lines to stderr,
  // MEMWIRE_LOG_LEVEL=debug|info|warn|error sets the level and also logs to stderr). The only place
  // memwire reads the environment; call it at your program's edge if you want them.
  static ConnectorOptions from_environment(ConnectorOptions defaults);
  static ConnectorOptions from_environment();
};

}  // namespace memwire
