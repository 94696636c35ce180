#pragma once

// What every Channel does the same way, in one place, so that HTTP and NATS cannot drift apart:
// the checks a call's arguments pass before anything reaches the wire, the words of a metadata
// error, and the arithmetic of a call's deadline.

#include <chrono>
#include <string>
#include <string_view>

#include "memwire/clock.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"

namespace memwire::sideband::channel_rules {

// ---- arguments: Error{InvalidArgument} (or Pairing) before anything reaches the wire ----

// A name to publish, fetch, wait for, withdraw or request (validate_name's rules).
void check_name(std::string_view name);
// A serve() prefix: a name, or "" for every name.
void check_prefix(std::string_view prefix);
// publish(): the name, and a TTL that is not negative (zero: until withdrawn).
void check_publish(std::string_view name, std::chrono::milliseconds ttl);
// publish_pool(): as publish(), and the pool's document within PoolMetadata::kMaxJsonBytes;
// returns that document.
std::string checked_pool_document(std::string_view name, const PoolMetadata& metadata,
                                  std::chrono::milliseconds ttl);
// request(): the name, and metadata that an owner can write into (Error{Pairing} otherwise).
void check_request(std::string_view name, const RdmaMetadata& writable);

// ---- what is stored under a name: Error{InvalidMetadata}, worded the same on every channel ----

// "metadata under '<name>': <why>"
[[noreturn]] void invalid_metadata(std::string_view name, std::string_view why);
// The operation's metadata in `document`, stored under `name`.
RdmaMetadata metadata_under(std::string_view name, const std::string& document);
// The pool's metadata in `document`: "pool metadata under '<name>': <why>" when it is none.
PoolMetadata pool_metadata_under(std::string_view name, const std::string& document);

// ---- deadlines ----

// When a call that was given `timeout` must be over, and what is left of it.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(std::chrono::milliseconds timeout) : at_(Clock::now() + timeout) {}
  Clock::time_point at() const noexcept { return at_; }
  bool passed() const noexcept { return Clock::now() >= at_; }
  // What is left, in whole milliseconds, never negative: the timeout of the series' next call.
  std::chrono::milliseconds left() const noexcept { return left_until(at_); }

 private:
  Clock::time_point at_;
};

}  // namespace memwire::sideband::channel_rules
