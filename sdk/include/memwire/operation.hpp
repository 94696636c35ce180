#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/export.hpp"
#include "memwire/metadata.hpp"
#include "memwire/status.hpp"

namespace memwire {

class Connector;
namespace detail {
class OperationCore;
}

// What the operations share: status, waiting, cancelling, completion callbacks. Move-only.
// The API's rules (README, "The API's rules"): work in flight ends with cancel(reason); every
// wait takes a deadline, returns only what it waited for, and throws memwire::Error for
// anything else; dropping an operation does what cancel() does (a passive one revokes remote
// access at once).
class MEMWIRE_API Operation {
 public:
  using Callback = std::function<void(OperationStatus)>;

  Operation(Operation&&) noexcept;
  Operation& operator=(Operation&&) noexcept;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;
  virtual ~Operation();

  OperationKind kind() const;
  OperationStatus status() const;

  // Blocks until the operation ends, for at most `timeout`. Returns Complete, the one status it
  // waits for; throws Error{Timeout} when the deadline passes first (the operation goes on),
  // Error{Cancelled} with the reason when it was cancelled (by either side; status() reads
  // Cancelled after a local cancel()), and the failure's Error when it errored.
  OperationStatus wait_for_completion(std::chrono::milliseconds timeout);

  // Ends it: an active operation stops, a passive one revokes remote access at once; waits in
  // other threads end with Error{Cancelled} carrying `reason` (or a default wording), and the
  // peer of a block transfer hears it (tcp, shm; verbs carries the code alone). Idempotent: a
  // finished operation is left as it is, except that cancelling an errored one throws
  // Error{InvalidArgument} (nixl_connect's rule).
  void cancel(std::string_view reason = {});

  // Runs `callback` once with the final status (at once when already final), on memwire's
  // progress thread, or on a thread that waits for this operation (a small one over tcp or shm)
  // or for any of the connector's verbs operations, and reads answers itself: never block in it.
  // Every callback added before the end has run by the time any wait_for_completion returns;
  // once the operation has ended, a wait waits for them even past its deadline.
  void on_complete(Callback callback);

  // The transport that moves (or moved) the bytes: "tcp", "shm", "verbs"; empty before known.
  std::string transport() const;

  // Why it errored or was cancelled; empty otherwise.
  std::string error_message() const;

 protected:
  explicit Operation(std::shared_ptr<detail::OperationCore> core);
  const detail::OperationCore& core() const;
  std::shared_ptr<detail::OperationCore> core_;
};

// Passive: local memory that a remote may read. Hand `metadata()` to the reader.
class [[nodiscard("dropping it revokes the remote access at once")]] MEMWIRE_API ReadableOperation
    : public Operation {
 public:
  RdmaMetadata metadata() const;
  // Keeps remote access open until `lifetime` from now instead of the metadata's expiry, and
  // returns the metadata to hand out from now on (same key and token, later expires_at): for
  // publications that outlive the connector's metadata_ttl. Never-expiring metadata stays so.
  // Throws Error{InvalidArgument} for lifetime <= 0, Error{Expired} once the old expiry passed,
  // Error{Cancelled} once the operation ended.
  RdmaMetadata renew(std::chrono::milliseconds lifetime);

 private:
  friend class Connector;
  using Operation::Operation;
};

// Passive: local memory that a remote may write. Hand `metadata()` to the writer.
class [[nodiscard("dropping it revokes the remote access at once")]] MEMWIRE_API WritableOperation
    : public Operation {
 public:
  RdmaMetadata metadata() const;
  // Keeps remote access open until `lifetime` from now instead of the metadata's expiry, and
  // returns the metadata to hand out from now on (same key and token, later expires_at): for
  // publications that outlive the connector's metadata_ttl. Never-expiring metadata stays so.
  // Throws Error{InvalidArgument} for lifetime <= 0, Error{Expired} once the old expiry passed,
  // Error{Cancelled} once the operation ended.
  RdmaMetadata renew(std::chrono::milliseconds lifetime);

 private:
  friend class Connector;
  using Operation::Operation;
};

// Active: reads remote readable memory into local descriptors.
class [[nodiscard("dropping it cancels the transfer")]] MEMWIRE_API ReadOperation
    : public Operation {
 public:
  // The local descriptors, filled; throws Error{InvalidArgument} before the read completed.
  const std::vector<Descriptor>& results() const;

 private:
  friend class Connector;
  using Operation::Operation;
};

// Active: writes local descriptors into remote writable memory.
class [[nodiscard("dropping it cancels the transfer")]] MEMWIRE_API WriteOperation
    : public Operation {
 private:
  friend class Connector;
  using Operation::Operation;
};

}  // namespace memwire
