#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/connector.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/export.hpp"
#include "memwire/operation.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::sideband {

namespace detail {
struct LeaseState;
class LeaseRenewer;
}  // namespace detail

// Memory published under a name by Worker::publish: a held thing, ended by close(reason) or
// by dropping it, which withdraws the name and revokes remote access. The operation completes
// when a reader is done. While it lives, its worker renews the metadata and the name before
// they expire.
class [[nodiscard("dropping it withdraws the name at once")]] MEMWIRE_API Lease {
 public:
  Lease(Lease &&) noexcept;
  Lease& operator=(Lease&&) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  const std::string& name() const;
  // The operation now published; the reference lasts until close() or Worker::republish().
  ReadableOperation& operation();
  // Waits until the data was read: returns Complete; throws as wait_for_completion does
  // (Error{Cancelled} once the lease was closed, from any thread).
  OperationStatus wait(std::chrono::milliseconds timeout);
  // Withdraws the name and cancels the operation now (with `reason`, which a wait in another
  // thread hears). Idempotent; dropping the lease does the same.
  void close(std::string_view reason = {});

 private:
  friend class Worker;
  explicit Lease(std::shared_ptr<detail::LeaseState> state);

  std::shared_ptr<detail::LeaseState> state_;
};

// What a serve() handler hands back for a name: the descriptors to write from, and whatever
// keeps their memory alive until the write is done (may be null when the caller owns it).
struct MEMWIRE_API ServedData {
  std::vector<Descriptor> descriptors;
  std::shared_ptr<const void> owner;
};

// A worker in a graph: a connector to move bytes and a channel to find peers' memory by name.
// Both must outlive the worker and everything it hands out. A worker renews its leases on a
// thread of its own (started with the first lease whose metadata expires); leases that outlive
// their worker are no longer renewed.
class MEMWIRE_API Worker {
 public:
  Worker(Connector& connector, Channel& channel);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Publishes `local` for remote reads under `name`. ttl zero = until the lease ends; otherwise
  // until the lease ends or `ttl` passed, whichever is first. Metadata that expires sooner (the
  // connector's metadata_ttl) is renewed, with the name, before it does (a third into it).
  [[nodiscard("dropping it withdraws the name at once")]] Lease publish(
      std::string_view name, std::vector<Descriptor> local,
      std::chrono::milliseconds ttl = std::chrono::milliseconds(0));

  enum class Lookup {
    Fetch,               // an unknown name is Error{NotFound} at once
    WaitUntilPublished,  // wait (within the timeout) for the name to appear
  };
  // Publishes `local` under the lease's name in place of its current memory (whose remote
  // access ends): for serving a name again after each read without a moment of NotFound.
  void republish(Lease& lease, std::vector<Descriptor> local,
                 std::chrono::milliseconds ttl = std::chrono::milliseconds(0));

  // Reads the memory published under `name` into `local`; returns the completed operation
  // (see transport()). `timeout` bounds the lookup and the transfer together.
  // A stop requested on `stop` ends the call with Error{Cancelled}: a wait for the name at once
  // (within about a second over HTTP), a fetch after its one round trip, a transfer by
  // cancelling it; the call returns only once nothing touches `local` any more.
  [[nodiscard("it holds the filled descriptors and the transport used")]] ReadOperation read(
      std::string_view name, std::vector<Descriptor> local, std::chrono::milliseconds timeout,
      Lookup lookup = Lookup::Fetch, std::stop_token stop = {});

  // Answers requests for names under `prefix` by writing handler(name) into the requester's
  // memory. The handler throws (e.g. Error{NotFound}) to refuse; the requester gets the error.
  using ServeHandler = std::function<ServedData(const std::string& name)>;
  struct ServeOptions {
    std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
    // Called after each completed write (on the channel's thread), e.g. to log transport().
    std::function<void(const std::string& name, const WriteOperation& write)> on_written;
  };
  [[nodiscard("dropping it ends the registration at once")]] std::unique_ptr<Subscription> serve(
      std::string_view prefix, ServeHandler handler, ServeOptions options);
  [[nodiscard("dropping it ends the registration at once")]] std::unique_ptr<Subscription> serve(
      std::string_view prefix, ServeHandler handler) {
    return serve(prefix, std::move(handler), ServeOptions{});
  }

  // Asks the owner of `name` to write it into `local`; returns the completed operation.
  // An owner whose connection drops mid-write (killed) ends the call at once with that error
  // (Error{PeerLost}), not with Error{Timeout} after `timeout`. A stop requested on `stop` ends
  // the call with Error{Cancelled}, and remote access to `local` with it: no byte lands after
  // it returns.
  [[nodiscard("it holds the written memory's operation and the transport used")]] WritableOperation
  request(std::string_view name, std::vector<Descriptor> local, std::chrono::milliseconds timeout,
          std::stop_token stop = {});

  Connector& connector() noexcept { return *connector_; }
  Channel& channel() noexcept { return *channel_; }

 private:
  // Publishes the state's current operation and schedules its renewal; state's mutex held.
  void publish_current(detail::LeaseState& state, std::chrono::milliseconds ttl);

  Connector* connector_;
  Channel* channel_;
  std::unique_ptr<detail::LeaseRenewer> renewer_;
};

}  // namespace memwire::sideband
