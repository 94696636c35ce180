#include "memwire/sideband/worker.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

#include "channel_rules.hpp"
#include "memwire/clock.hpp"
#include "memwire/error.hpp"

namespace memwire::sideband {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits for `operation` to complete; a cancelled one throws Error{Cancelled} naming `what`
// (or, after a stop on `stop`, `stopped`), any other failure as the operation threw it.
void wait_complete(Operation& operation, milliseconds timeout, const std::string& what,
                   const std::stop_token& stop = {}, const std::string& stopped = {}) {
  try {
    operation.wait_for_completion(timeout);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::Cancelled) throw;
    if (stop.stop_requested()) throw Error(ErrorCode::Cancelled, stopped);
    throw Error(ErrorCode::Cancelled, what + " was cancelled: " + std::string(error.message()));
  }
}

// Error{Cancelled} with `message` once a stop was requested on `stop`.
void throw_if_stopped(const std::stop_token& stop, const std::string& message) {
  if (stop.stop_requested()) throw Error(ErrorCode::Cancelled, message);
}

// Cancels `operation` unless it ended already (cancelling an errored one throws).
void cancel_quietly(Operation& operation, std::string_view reason = {}) noexcept {
  try {
    operation.cancel(reason);
  } catch (const std::exception&) {
    // It errored meanwhile: it touches nothing any more either.
  }
}

// Metadata is renewed when a third of its remaining lifetime passed (two thirds are left for a
// slow channel or a busy machine), never more often than this; a renewal the channel refused
// is tried again after at most kRenewalRetry.
constexpr milliseconds kShortestRenewal(5);
constexpr milliseconds kRenewalRetry(1000);

// How long the name should live in the channel: no longer than the metadata behind it, nor
// than the publisher's ttl (`until`); zero = for ever.
milliseconds name_ttl(const RdmaMetadata& metadata, std::optional<Clock::time_point> until) {
  milliseconds ttl(0);
  if (metadata.expires_at_ms() != 0)
    ttl = milliseconds(std::max<std::int64_t>(1, metadata.expires_at_ms() - unix_now_ms()));
  if (until) {
    auto left = std::max(milliseconds(1), left_until(*until));
    ttl = ttl.count() > 0 ? std::min(ttl, left) : left;
  }
  return ttl;
}

// When `metadata` must be renewed; none when it never expires or outlives the publisher's ttl.
std::optional<Clock::time_point> renewal_due(const RdmaMetadata& metadata,
                                             std::optional<Clock::time_point> until) {
  if (metadata.expires_at_ms() == 0) return std::nullopt;
  const auto now = Clock::now();
  const milliseconds remaining(std::max<std::int64_t>(0, metadata.expires_at_ms() - unix_now_ms()));
  if (until && *until <= now + remaining) return std::nullopt;
  return now + std::max(kShortestRenewal, remaining / 3);
}

}  // namespace

namespace detail {

// What a lease and its worker's renewer share; the renewer holds it weakly. The mutex orders
// renewals with republish and release: a renewal never brings back a withdrawn name.
struct LeaseState {
  std::mutex mutex;
  Channel* channel = nullptr;  // null once closed
  std::string name;
  // Shared with the waits in flight: close() and republish() from another thread end them
  // (Cancelled) instead of pulling the operation from under them.
  std::shared_ptr<ReadableOperation> operation;
  std::string closed_because;              // once closed: what later waits hear
  std::optional<Clock::time_point> until;  // the publisher's ttl: nothing is renewed past it
  milliseconds lifetime{0};                // what each renewal extends the metadata by
  std::uint64_t generation = 0;            // bumped by each (re)publish: older renewals are void
};

// One thread per worker that renews leases when due: it sleeps on a condition variable until
// the earliest renewal (or a new one, or the end).
class LeaseRenewer {
 public:
  LeaseRenewer() = default;
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;
  ~LeaseRenewer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void schedule(std::weak_ptr<LeaseState> state, std::uint64_t generation, Clock::time_point due) {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    due_.emplace(due, Entry{std::move(state), generation});
    wake_.notify_all();
  }

 private:
  struct Entry {
    std::weak_ptr<LeaseState> state;
    std::uint64_t generation;
  };

  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (due_.empty()) {
        wake_.wait(lock);
        continue;
      }
      if (auto first = due_.begin()->first; Clock::now() < first) {
        wake_.wait_until(lock, first);
        continue;
      }
      auto entry = std::move(due_.begin()->second);
      due_.erase(due_.begin());
      lock.unlock();
      auto next = renew(entry);
      lock.lock();
      if (next) due_.emplace(*next, std::move(entry));
    }
  }

  // Renews the metadata and the name; returns when to do it again, if ever.
  static std::optional<Clock::time_point> renew(const Entry& entry) {
    auto state = entry.state.lock();
    if (!state) return std::nullopt;
    std::lock_guard lock(state->mutex);
    if (!state->channel || !state->operation || state->generation != entry.generation)
      return std::nullopt;
    if (state->until && Clock::now() >= *state->until) return std::nullopt;
    try {
      auto metadata = state->operation->renew(state->lifetime);
      state->channel->publish(state->name, metadata, name_ttl(metadata, state->until));
      return renewal_due(metadata, state->until);
    } catch (const std::exception&) {
      // Read, cancelled or expired: nothing left to keep alive.
      if (is_terminal(state->operation->status())) return std::nullopt;
      auto expires = state->operation->metadata().expires_at_ms();
      if (expires != 0 && unix_now_ms() > expires) return std::nullopt;
      // The channel refused (down, restarting): again soon, within what is left.
      milliseconds left(std::max<std::int64_t>(0, expires - unix_now_ms()));
      return Clock::now() + std::clamp(left / 4, kShortestRenewal, kRenewalRetry);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::multimap<Clock::time_point, Entry> due_;
  std::thread thread_;
};

}  // namespace detail

Lease::Lease(std::shared_ptr<detail::LeaseState> state) : state_(std::move(state)) {}
Lease::Lease(Lease&& other) noexcept = default;

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

Lease::~Lease() { close(); }

const std::string& Lease::name() const {
  static const std::string none;
  return state_ ? state_->name : none;
}

ReadableOperation& Lease::operation() {
  if (!state_ || !state_->operation)
    throw Error(ErrorCode::InvalidArgument, "the lease was closed");
  return *state_->operation;
}

OperationStatus Lease::wait(milliseconds timeout) {
  if (!state_) throw Error(ErrorCode::InvalidArgument, "the lease was moved from");
  std::shared_ptr<ReadableOperation> operation;
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->operation)
      throw Error(ErrorCode::Cancelled,
                  "the lease of '" + state_->name + "' was closed" + state_->closed_because);
    operation = state_->operation;
  }
  return operation->wait_for_completion(timeout);
}

void Lease::close(std::string_view reason) {
  if (!state_) return;
  std::shared_ptr<ReadableOperation> ending;
  {
    std::lock_guard lock(state_->mutex);
    if (auto* channel = std::exchange(state_->channel, nullptr)) {
      try {
        channel->withdraw(state_->name);
      } catch (const std::exception&) {
        // The name expires by itself; a lease must end even when the channel is down.
      }
      if (!reason.empty()) state_->closed_because = ": " + std::string(reason);
    }
    ending = std::exchange(state_->operation, nullptr);
  }
  if (ending) cancel_quietly(*ending, reason);
}

Worker::Worker(Connector& connector, Channel& channel)
    : connector_(&connector),
      channel_(&channel),
      renewer_(std::make_unique<detail::LeaseRenewer>()) {}

Worker::~Worker() = default;

void Worker::publish_current(detail::LeaseState& state, milliseconds ttl) {
  // (Re)published now: the publisher's ttl counts from here.
  state.until.reset();
  if (ttl.count() > 0) state.until = Clock::now() + ttl;
  auto metadata = state.operation->metadata();
  channel_->publish(state.name, metadata, name_ttl(metadata, state.until));
  if (metadata.expires_at_ms() != 0)
    state.lifetime =
        milliseconds(std::max<std::int64_t>(1, metadata.expires_at_ms() - unix_now_ms()));
}

Lease Worker::publish(std::string_view name, std::vector<Descriptor> local, milliseconds ttl) {
  channel_rules::check_name(name);
  auto state = std::make_shared<detail::LeaseState>();
  state->name = std::string(name);
  state->operation =
      std::make_shared<ReadableOperation>(connector_->create_readable(std::move(local)));
  std::lock_guard lock(state->mutex);
  publish_current(*state, ttl);
  state->channel = channel_;
  if (auto due = renewal_due(state->operation->metadata(), state->until))
    renewer_->schedule(state, state->generation, *due);
  return Lease(state);
}

void Worker::republish(Lease& lease, std::vector<Descriptor> local, milliseconds ttl) {
  auto& state = lease.state_;
  if (!state) throw Error(ErrorCode::InvalidArgument, "republish: the lease was closed");
  auto operation =
      std::make_shared<ReadableOperation>(connector_->create_readable(std::move(local)));
  std::shared_ptr<ReadableOperation> replaced;
  {
    std::lock_guard lock(state->mutex);
    if (!state->channel) throw Error(ErrorCode::InvalidArgument, "republish: the lease was closed");
    const auto old_until = state->until;
    const auto old_lifetime = state->lifetime;
    replaced = std::exchange(state->operation, std::move(operation));
    try {
      publish_current(*state, ttl);
    } catch (...) {
      // The name still points at the old memory: keep serving (and renewing) it.
      state->operation = std::move(replaced);
      state->until = old_until;
      state->lifetime = old_lifetime;
      throw;
    }
    ++state->generation;
    if (auto due = renewal_due(state->operation->metadata(), state->until))
      renewer_->schedule(state, state->generation, *due);
  }
  // The old operation ends here (its remote access with it; a wait on it hears Cancelled); the
  // name points at the new one.
  cancel_quietly(*replaced, "the name was republished");
}

ReadOperation Worker::read(std::string_view name, std::vector<Descriptor> local,
                           milliseconds timeout, Lookup lookup, std::stop_token stop) {
  const channel_rules::Deadline deadline(timeout);
  const std::string what = "reading '" + std::string(name) + "'";
  throw_if_stopped(stop, what + ": cancelled during the lookup");
  auto metadata = lookup == Lookup::Fetch ? channel_->fetch(name, timeout)
                                          : channel_->wait_for(name, timeout, stop);
  throw_if_stopped(stop, what + ": cancelled during the lookup");
  auto operation = connector_->begin_read(metadata, std::move(local));
  // Destroying the operation on a throw (timeout) cancels it.
  {
    // A stop cancels the transfer: the wait then ends (Cancelled) once nothing touches `local`.
    std::stop_callback on_stop(stop, [&operation] { cancel_quietly(operation); });
    try {
      wait_complete(operation, deadline.left(), what, stop,
                    what + ": cancelled during the transfer");
    } catch (const Error& error) {
      if (error.code() != ErrorCode::Timeout) throw;
      // The caller's timeout, not what was left of it after the lookup and the connect.
      throw Error(ErrorCode::Timeout,
                  what + ": not finished within " + std::to_string(timeout.count()) + " ms");
    }
  }
  return operation;
}

std::unique_ptr<Subscription> Worker::serve(std::string_view prefix, ServeHandler handler,
                                            ServeOptions options) {
  if (!handler) throw Error(ErrorCode::InvalidArgument, "serve: no handler");
  auto* connector = connector_;
  return channel_->serve(
      prefix, [connector, handler = std::move(handler), options = std::move(options)](
                  const std::string& name, const RdmaMetadata& writable) {
        auto data = handler(name);
        auto operation = connector->begin_write(data.descriptors, writable);
        wait_complete(operation, options.write_timeout, "writing '" + name + "'");
        if (options.on_written) options.on_written(name, operation);
      });
}

WritableOperation Worker::request(std::string_view name, std::vector<Descriptor> local,
                                  milliseconds timeout, std::stop_token stop) {
  channel_rules::check_name(name);
  const std::string what = "request for '" + std::string(name) + "'";
  throw_if_stopped(stop, what + ": cancelled");
  const channel_rules::Deadline deadline(timeout);
  auto operation = connector_->create_writable(std::move(local));
  // When the owner dies mid-write our connector sees it at once (the operation errors with
  // PeerLost): the request stops waiting for a reply that will never come. So does a stop.
  std::stop_source abandon;
  operation.on_complete([abandon](OperationStatus status) mutable {
    if (status == OperationStatus::Errored) abandon.request_stop();
  });
  {
    // A stop revokes the owner's access to `local` (no byte lands after this returns) and ends
    // the wait for its reply.
    std::stop_callback on_stop(stop, [&operation, abandon]() mutable {
      cancel_quietly(operation);
      abandon.request_stop();
    });
    try {
      channel_->request(name, operation.metadata(), timeout, abandon.get_token());
    } catch (const Error&) {
      throw_if_stopped(stop, what + ": cancelled");
      // The operation's own failure says more than the channel's view of it: throws it (at
      // once: it ended).
      if (operation.status() == OperationStatus::Errored)
        operation.wait_for_completion(std::max(deadline.left(), milliseconds(1000)));
      throw;
    }
    // The owner replies once its write completed; our side completes on the notice that follows.
    wait_complete(operation, std::max(deadline.left(), milliseconds(1000)), what, stop,
                  what + ": cancelled");
  }
  return operation;
}

}  // namespace memwire::sideband
