#pragma once

// The durable side of the NATS channel: the JetStream KV bucket that is the registry, and the
// parts bucket that holds metadata too large for one message (see nats.hpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "channel_rules.hpp"
#include "connection.hpp"
#include "entry.hpp"
#include "handles.hpp"
#include "memwire/metadata.hpp"

namespace memwire::sideband::nats_detail {

// An entry ready to send: inline, or referring to pieces stored under `part_key`.
struct Envelope {
  std::string entry;
  std::string part_key;  // empty when inline
};

// A pool's key in the registry bucket: "=pool.<name>". '=' is in no name, so a pool and an
// operation may share a name, and list() skips these keys.
inline constexpr std::string_view kPoolKeyPrefix = "=pool.";
inline std::string pool_key(std::string_view name) {
  return std::string(kPoolKeyPrefix) + std::string(name);
}
// What the pieces of a request's large writable metadata are stored under: "=request.<name>".
inline std::string request_key(std::string_view name) { return "=request." + std::string(name); }

class Store {
 public:
  using Deadline = channel_rules::Deadline;

  // Opens (or creates) the registry bucket: Error{Transport} when JetStream is not enabled.
  // While a leader election keeps the bucket from answering (a node lost) for request_timeout,
  // the first call that needs it opens it, within that call's deadline.
  explicit Store(std::shared_ptr<NatsConnection> connection);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::shared_ptr<NatsConnection>& connection() const noexcept { return connection_; }

  // The registry bucket, opened within `deadline` if the constructor could not open it.
  kvStore* registry(Deadline deadline);

  // Runs `call` on a bucket, and again while it fails the way a JetStream leader election
  // makes calls fail (NATS_TIMEOUT; NATS_ERR, such as a stream without a leader;
  // NATS_NO_RESPONDERS), until `deadline`: a read or publish by name lasts through a node's
  // loss (an election took 3.9-8.4 s) as long as its caller allows, not request_timeout. The
  // first try waits as the bucket's calls do (request_timeout); later ones at most a second and
  // never past `deadline`. A refusal by the server (permissions) is not tried again.
  enum class Bucket { Registry, Parts };
  using Call = std::function<natsStatus(kvStore*)>;
  natsStatus through_failover(Bucket bucket, Deadline deadline, const Call& call);
  // A KV get of `key` through failover: its status, and `entry` holding what it read.
  natsStatus get(Bucket bucket, const std::string& key, Deadline deadline, EntryPtr& entry);
  // Whether a failed call's status is one an election causes.
  static bool election_may_cause(natsStatus status) noexcept;

  // `metadata_json` as one entry, its pieces stored in the parts bucket when it does not fit in
  // one message, under "<key>.<random>.<i>": subjects under the entry's own key, which the NATS
  // permissions of deploy/nats/roles.conf let only that name's owner write.
  Envelope envelope(const std::string& metadata_json, std::int64_t expires_at_ms,
                    std::string_view key, Deadline deadline);

  // The registry's entry of `name`: Error{NotFound} when missing, deleted or expired.
  RdmaMetadata from_registry(std::string_view name, bool may_retry, Deadline deadline);
  // The metadata an entry holds, its pieces read back when it has some. With `may_retry`, pieces
  // replaced meanwhile by a publish or withdraw send us to the registry once more. No KV get
  // starts past `deadline` (Error{Timeout}): an entry of many pieces, each a round trip, must not
  // hold the caller past its timeout. An entry with more pieces than its size needs (pieces
  // are written max_entry() bytes each) is Error{InvalidMetadata} before any is read.
  RdmaMetadata resolve(const Entry& entry, std::string_view name, bool may_retry,
                       Deadline deadline);
  // The same for any document stored under `key` (a pool's is not its name, see
  // pool_key()): its JSON text, not parsed. `name` is what errors show.
  std::string document_from_registry(std::string_view key, std::string_view name, bool may_retry,
                                     Deadline deadline);
  std::string document_of(const Entry& entry, std::string_view key, std::string_view name,
                          bool may_retry, Deadline deadline);
  // Best effort: pieces left behind only take room until the bucket's MaxAge. Piece by piece
  // (each a purge of its own key): purging the parts stream by subject would need a permission
  // over every owner's pieces.
  void delete_parts(const std::string& part_key) noexcept;

  static std::string_view value_of(kvEntry* entry);

 private:
  // Opens `bucket`, or creates it with this channel's settings; a bucket that existed is
  // checked against them (check_existing_bucket). `probed`: what wait_for_bucket said already.
  KvPtr open_bucket(const std::string& bucket, Deadline deadline,
                    std::optional<natsStatus> probed = std::nullopt);
  natsStatus wait_for_bucket(const std::string& bucket, Deadline deadline);
  // The bucket's long-lived handle (its waits are request_timeout), opened if need be.
  kvStore* handle(Bucket bucket, Deadline deadline);
  int known_servers() const;
  // How many copies this channel gives a bucket it creates: kv_replicas, or (0) one per known
  // server up to 3.
  int wanted_replicas() const;
  // A bucket made elsewhere that would lose names: a max age shorter than this channel's is
  // refused (Error{InvalidArgument}); fewer copies than this channel would make is said through
  // NatsOptions::log (a warn line), since the names stay readable while every copy's node lives.
  void check_existing_bucket(kvStore* store, const std::string& bucket);
  kvStore* parts_store(Deadline deadline);
  std::size_t store_parts(const std::string& part_key, const std::string& json, Deadline deadline);
  // The pieces of an entry stored under `key`: Error{InvalidMetadata} when its part key is not
  // under `key` (an entry pointing at another name's pieces).
  std::string read_parts(const Entry& entry, std::string_view key, std::string_view name,
                         Deadline deadline);

  std::shared_ptr<NatsConnection> connection_;
  const NatsOptions& options_;
  std::mutex open_mutex_;
  KvPtr kv_;     // null while an election kept it from opening
  KvPtr parts_;  // opened on first use
};

}  // namespace memwire::sideband::nats_detail
