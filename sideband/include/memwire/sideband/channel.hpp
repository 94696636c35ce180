#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/export.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"

namespace memwire::sideband {

// Throws Error{InvalidArgument} unless `name` is 1..200 characters of [A-Za-z0-9_-] tokens
// separated by single dots: what both NATS subject tokens and URL path segments accept.
MEMWIRE_API void validate_name(std::string_view name);

// Ends a serve() registration when destroyed.
class MEMWIRE_API Subscription {
 public:
  virtual ~Subscription() = default;
};

// The seams between workers and the ways metadata travels by name (HTTP, NATS): a registry of
// names and a request service. A Channel is both, over one connection.
// Errors: Error{NotFound} for an unknown or withdrawn name, Error{Timeout} for a slow owner or
// server, Error{InvalidMetadata} for a stored document that does not parse (its message starts
// "metadata under '<name>': ", or "pool metadata under '<name>': ", on every channel),
// Error{AccessDenied} for refused credentials, Error{Transport} for anything else on the wire.
// A bad name or a negative TTL is Error{InvalidArgument} before anything reaches the wire.

// Names -> metadata.
class MEMWIRE_API Registry {
 public:
  virtual ~Registry() = default;

  // Publishes `metadata` under `name` for `ttl` (zero = until withdrawn; negative = refused);
  // replaces an old value.
  virtual void publish(std::string_view name, const RdmaMetadata& metadata,
                       std::chrono::milliseconds ttl) = 0;
  virtual RdmaMetadata fetch(std::string_view name, std::chrono::milliseconds timeout) = 0;
  virtual void withdraw(std::string_view name) = 0;
  // Like fetch, but waits (without polling sleeps) until the name is published. A stop
  // requested on `abandon` ends the wait early with Error{Cancelled} (within about a second
  // over HTTP, at once over NATS): a caller that gave up need not hold a thread until timeout.
  virtual RdmaMetadata wait_for(std::string_view name, std::chrono::milliseconds timeout,
                                std::stop_token abandon = {}) = 0;
  virtual std::vector<std::string> list() = 0;

  // Pools (memwire/pool.hpp): a pool's metadata by name, published once by its owner and
  // fetched once per peer. Pool names are a namespace of their own: a pool and an operation
  // may have the same name without touching each other, and list() shows operations only.
  // The same names, TTLs and errors as above; a stored document that PoolMetadata::from_json
  // refuses (or one over PoolMetadata::kMaxJsonBytes) is Error{InvalidMetadata}.
  virtual void publish_pool(std::string_view name, const PoolMetadata& metadata,
                            std::chrono::milliseconds ttl) = 0;
  virtual PoolMetadata fetch_pool(std::string_view name, std::chrono::milliseconds timeout) = 0;
  // Like fetch_pool, but waits until the pool's name is published (as wait_for does).
  virtual PoolMetadata wait_for_pool(std::string_view name, std::chrono::milliseconds timeout,
                                     std::stop_token abandon = {}) = 0;
  // Not an error when the name is not published.
  virtual void withdraw_pool(std::string_view name) = 0;
};

// A reader's pool metadata by name: fetched once, then answered from memory until forget()
// says the entry is stale (a transfer failed with Error{Expired}: the owner dropped or
// re-registered the pool, or restarted), so the next get() fetches the current metadata.
// Thread-safe; two threads that miss the same name at once may both fetch it.
class MEMWIRE_API PoolMetadataCache {
 public:
  explicit PoolMetadataCache(Registry& registry) : registry_(registry) {}

  // The cached metadata of `name`, or Registry::fetch_pool's (then cached); throws as it does.
  PoolMetadata get(std::string_view name, std::chrono::milliseconds timeout);
  // Drops `name`'s entry.
  void forget(std::string_view name);
  // Drops `name`'s entry only while it is still `stale` (the metadata a failed transfer used):
  // of two readers that failed with the same stale metadata, the second does not drop the
  // fresh entry that the first fetched already.
  void forget(std::string_view name, const PoolMetadata& stale);
  void clear();
  std::size_t size() const;

 private:
  Registry& registry_;
  mutable std::mutex mutex_;
  std::map<std::string, PoolMetadata, std::less<>> entries_;
};

// Request/reply: the owner of names under `prefix` is asked to write the named data into a
// requester's writable memory.
class MEMWIRE_API RequestService {
 public:
  virtual ~RequestService() = default;

  // The handler returns once the data is written (or throws).
  using RequestHandler = std::function<void(const std::string& name, const RdmaMetadata& writable)>;
  [[nodiscard("dropping it ends the registration at once")]] virtual std::unique_ptr<Subscription>
  serve(std::string_view prefix, RequestHandler handler) = 0;
  // Sends `writable` to the owner of `name` and returns when the owner reports it written;
  // throws the owner's error, Error{NotFound} when nobody serves `name`, Error{Timeout}.
  // A stop requested on `abandon` ends the wait early with Error{Cancelled}: the caller knows
  // the answer already (its writable operation failed) and need not wait for the timeout.
  virtual void request(std::string_view name, const RdmaMetadata& writable,
                       std::chrono::milliseconds timeout, std::stop_token abandon = {}) = 0;
};

// Both halves over one connection: what a Worker takes.
class Channel : public Registry, public RequestService {};

// The declarations of Registry's calls in a class that implements them (HttpChannel,
// NatsChannel, the NATS channel's registry half): one list, so the interface above is restated
// nowhere else.
#define MEMWIRE_SIDEBAND_REGISTRY_OVERRIDES                                                        \
  void publish(std::string_view name, const RdmaMetadata& metadata, std::chrono::milliseconds ttl) \
      override;                                                                                    \
  RdmaMetadata fetch(std::string_view name, std::chrono::milliseconds timeout) override;           \
  void withdraw(std::string_view name) override;                                                   \
  RdmaMetadata wait_for(std::string_view name, std::chrono::milliseconds timeout,                  \
                        std::stop_token abandon = {}) override;                                    \
  std::vector<std::string> list() override;                                                        \
  void publish_pool(std::string_view name, const PoolMetadata& metadata,                           \
                    std::chrono::milliseconds ttl) override;                                       \
  PoolMetadata fetch_pool(std::string_view name, std::chrono::milliseconds timeout) override;      \
  PoolMetadata wait_for_pool(std::string_view name, std::chrono::milliseconds timeout,             \
                             std::stop_token abandon = {}) override;                               \
  void withdraw_pool(std::string_view name) override

// Likewise for RequestService's calls (HttpChannel, NatsChannel, the NATS request half).
#define MEMWIRE_SIDEBAND_REQUEST_SERVICE_OVERRIDES                                                \
  [[nodiscard("dropping it ends the registration at once")]] std::unique_ptr<Subscription> serve( \
      std::string_view prefix, RequestHandler handler) override;                                  \
  void request(std::string_view name, const RdmaMetadata& writable,                               \
               std::chrono::milliseconds timeout, std::stop_token abandon = {}) override

}  // namespace memwire::sideband
