#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/export.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband {

struct MEMWIRE_API NatsOptions {
  // One or more server URLs ("nats://host:4222", "tls://host:4222"); tried in this order. An
  // entry may itself be a comma-separated list ("nats://a:4222,nats://b:4222"), as one
  // command-line flag or environment variable gives it. Give every node of a cluster: a client
  // reconnects to the next one when its server goes away.
  std::vector<std::string> servers{"nats://127.0.0.1:4222"};
  std::string connection_name;  // shown by the server's monitoring; empty = none

  // Credentials: set at most one kind. user/password may also be given in the URL.
  std::string user;
  std::string password;
  std::string token;
  std::string nkey_public;     // NKey public key ("U..."), together with nkey_seed_file
  std::string nkey_seed_file;  // file holding the NKey seed ("SU..."), read at each connect
  std::string creds_file;      // decentralised auth: JWT + seed in one .creds file

  // TLS: on when `tls` is set or any file is given (a "tls://" URL also turns it on).
  bool tls = false;
  std::string ca_file;    // PEM CA bundle the server's certificate must chain to
  std::string cert_file;  // client certificate chain (mutual TLS), with key_file
  std::string key_file;

  // First subject token(s): "<subject_prefix>.md.<name>" and "<subject_prefix>.get.<name>".
  // Channels with different prefixes and buckets do not see each other's names.
  std::string subject_prefix = "memwire";
  // Where replies to this client come: its requests' replies, JetStream answers and KV watches
  // arrive on "<inbox_prefix>.<random>". Empty (the default) = "_INBOX_<user>" when a user is
  // given (a character other than a letter, digit, '_' or '-' becomes '_'), else nats.c's
  // "_INBOX". Per-user inboxes let the server allow each user its own replies only
  // (deploy/nats/roles.conf: memwire-reader may subscribe "_INBOX_memwire-reader.>" alone), so
  // no other credential reads them. A name: tokens of letters, digits, '_', '-', dots between.
  std::string inbox_prefix;
  // The JetStream key/value bucket that is the durable registry; created if absent.
  std::string kv_bucket = "memwire";
  // Upper bound on how long any entry stays in the bucket (its MaxAge), applied only when this
  // channel creates the bucket. 0 = none: entries without a TTL stay until withdrawn. A bucket
  // that exists with a shorter MaxAge (made by hand) is refused (Error{InvalidArgument}): its
  // names would vanish while published.
  std::chrono::milliseconds kv_max_age{0};
  // How many servers hold a copy of each KV bucket, applied only when this channel creates the
  // bucket (1..5, at most the cluster's size). 1 suits a single server; 3 on a 3-node cluster
  // keeps every name readable (and lets a new stream leader take over) when one node dies.
  // 0 (the default) = as many as the servers the connection knows (given and discovered from
  // the cluster), up to 3; one if the servers turn out not to be one JetStream cluster. A
  // bucket that exists with fewer copies is used, and said through `log` (below).
  int kv_replicas = 0;

  // Connecting, and every JetStream/KV call, give up after this long (Error{Timeout}).
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
  std::chrono::milliseconds request_timeout = std::chrono::seconds(5);

  // After a lost connection: attempts (-1 = forever), the wait between rounds, and how many
  // bytes of outgoing messages are buffered meanwhile (past that, publishing fails).
  int max_reconnect = -1;
  std::chrono::milliseconds reconnect_wait = std::chrono::milliseconds(250);
  int reconnect_buffer_bytes = 8 * 1024 * 1024;
  // A server that stops answering (its host or link gone, no TCP reset) counts as lost after
  // max_pings_out unanswered pings sent ping_interval apart; then the next server is tried.
  std::chrono::milliseconds ping_interval = std::chrono::seconds(5);
  int max_pings_out = 2;

  // Called with one JSON line per warning about the registry's buckets; today one that exists
  // with fewer copies than this channel would create ("event":"kv_replicas_below_wanted", with
  // "replicas" and "wanted"): its names die with fewer nodes than asked. Called on the thread
  // that opens the bucket (the constructor; the parts bucket: the first call that needs it).
  // Empty = silent; the memwire programs and Python's NatsChannel write it to stderr.
  std::function<void(std::string_view)> log;

  // Called on a nats.c thread when the connection drops and when it is back (subscriptions
  // already resent). Keep them short; they must not call back into the channel.
  std::function<void()> on_disconnected;
  std::function<void()> on_reconnected;
};

// Channel over NATS (nats.c).
//
// Subjects (with the default subject_prefix "memwire") and storage:
//   memwire.md.<name>   core request/reply: the live publisher of <name> answers with its entry.
//   memwire.get.<name>  request/reply service (serve/request), queue group "memwire".
//   KV bucket <kv_bucket>, key <name>: the durable registry (list, wait_for, fallback of fetch).
//   wait_for reads the registry, then waits on a plain subscription of $KV.<kv_bucket>.<name>
//   (every put, as it is stored) and reads the registry again after a reconnect.
//   KV bucket <kv_bucket>_parts: pieces of entries larger than one NATS message.
//   KV bucket <kv_bucket>, key =pool.<name>: a pool's metadata (publish_pool and the rest). '='
//   is in no name, so pools and operations never share a key; list() skips pools. Pools have
//   no live responder: fetch_pool reads the registry, wait_for_pool waits as wait_for does.
//
// An entry (KV value and md reply) is a JSON object, either
//   {"expires_at_ms": E, "metadata": {...}}                      inline, or
//   {"expires_at_ms": E, "parts": N, "part_key": K, "size": S}   metadata JSON split into N
//                                                                pieces under K.0 .. K.N-1
// with E the unix time in ms when the TTL runs out (0 = never). Any other object is taken as
// bare metadata without expiry, so `nats kv put memwire NAME "$(cat md.json)"` works too.
//
// fetch(name, timeout): a core request on memwire.md.<name> first (lowest latency, answered by
// the live publisher). No responders (no live publisher), or an entry already expired at the
// publisher, falls back to one KV get; a missing, deleted or expired key there is
// Error{NotFound}. A request that gets no reply within `timeout` is Error{Timeout} (someone
// subscribes but does not answer: a slow owner); KV is not consulted then. A timeout below
// 1 ms counts as 1 ms. A KV call's first try waits up to request_timeout (so a `timeout` shorter
// than that may be overrun by one); the pieces of a large entry (one KV get each) are read
// within `timeout`: no get starts past it (Error{Timeout}), and an entry claiming more pieces
// than its size needs is Error{InvalidMetadata} before any is read. serve() reads a request's
// pieces within request_timeout the same way.
//
// Failover: a KV call that fails the way a JetStream leader election makes calls fail (no
// answer in time, a stream without a leader, no responders) is tried again, each try at most a
// second, until the caller's deadline: fetch, wait_for, fetch_pool and wait_for_pool their
// `timeout`, request() its `timeout` for a large writable's pieces, and publish, publish_pool
// and withdraw (which take none) request_timeout. A channel made while the registry's bucket
// does not answer (an election after a node died) is made all the same once request_timeout
// has passed; its first call opens the bucket within that call's deadline. So a read by name
// with a deadline longer than the election succeeds (an election took 3.9-8.4 s here).
//
// TTL: nats.c 3.4 / nats-server 2.9 have no per-key TTL, so each entry carries its expiry E and
// readers treat an expired entry as absent; the publisher's responder stops answering then.
// The bucket's MaxAge (kv_max_age) bounds how long any entry, expired or orphaned by a
// publisher that died without withdraw(), occupies the store. Clocks of publisher and reader
// are assumed to agree to well under the TTL.
//
// Large metadata: when an entry does not fit in one message (the server's max payload, 1 MiB by
// default), publish() stores the metadata JSON in pieces in the parts bucket and the entry
// refers to them; fetch/wait_for reassemble them. request() does the same for a large writable
// metadata. Pieces are removed by withdraw() and by a later publish() of the same name. They
// are stored under the entry's own key (NAME.<random>.<i>, =pool.NAME..., =request.NAME...),
// so NATS permissions can give each owner its own pieces only (deploy/nats/roles.conf), and a
// reader refuses an entry whose pieces lie under another key.
//
// Publishing one name from several processes: the registry keeps the last publish; live
// responders all answer and fetch takes the first reply. Keep one owner per name.
//
// serve(prefix): a prefix "a.b" serves the name "a.b" and every name below it ("a.b.c", ...);
// an empty prefix serves every name. Each serve() owns one thread per subscribed subject (so
// its handler may run on two threads at once), and a slow handler never delays metadata
// responders; run several serve() calls (here or in other processes) to answer in parallel:
// the queue group gives each request to one of them. Unlike the HTTP endpoint, overlapping
// prefixes ("a" and "a.b") share requests at random instead of the longest prefix winning.
// A request whose reply does not arrive in time is Error{Timeout}; the owner may still write.
//
// Reconnects: nats.c resubscribes responders, serve() subscriptions and waiters by itself
// after a lost connection (to the same server or, with a server list, the next one that
// answers); calls made meanwhile are buffered (up to reconnect_buffer_bytes) and fail with
// Error{Timeout} if no server is back within their timeout. Entries live in the JetStream
// store, so a server restarted on the same store answers for them again, and with
// kv_replicas > 1 in a cluster the other nodes answer for them while one is down.
//
// A dead owner: a process that exits (or is killed) closes its connection, the server drops
// its subscriptions at once, so request() of its names is Error{NotFound} ("no responders")
// without waiting for the timeout, and fetch() falls back to the registry, which may still hold
// the dead owner's entry (no withdraw() ran): reading it then fails in the connector
// (PeerLost: nobody listens at the endpoint; Timeout when the whole host is gone). A host that
// vanishes without closing its sockets keeps its subscriptions until the server's ping
// timeout (ping_interval x ping_max; deploy/nats sets 5 s x 2).
//
// withdraw() of a name that is not published is not an error; it removes the registry entry
// even when another process published it (that process's responder stays until it withdraws
// or exits). Thread-safe: all methods may be called from several threads at once.
class MEMWIRE_API NatsChannel final : public Channel {
 public:
  // Connects at once. Throws Error{AccessDenied} when the server refuses the credentials,
  // Error{Transport} when no server can be reached or JetStream is not enabled,
  // Error{InvalidArgument} for contradictory options.
  explicit NatsChannel(NatsOptions options);
  ~NatsChannel() override;
  NatsChannel(const NatsChannel&) = delete;
  NatsChannel& operator=(const NatsChannel&) = delete;

  MEMWIRE_SIDEBAND_REGISTRY_OVERRIDES;  // channel.hpp
  MEMWIRE_SIDEBAND_REQUEST_SERVICE_OVERRIDES;

  // Round trip to the server: everything sent before (subscriptions included) has been
  // processed when it returns. Error{Timeout} or Error{Transport} otherwise.
  void flush(std::chrono::milliseconds timeout);
  // The server's limit on one message, in bytes.
  std::size_t max_payload() const;
  // The URL of the server currently connected to (empty while disconnected).
  std::string connected_url() const;

 private:
  class MEMWIRE_HIDDEN Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace memwire::sideband
