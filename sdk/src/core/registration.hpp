#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "core/access_gate.hpp"
#include "core/operation_core.hpp"
#include "core/pool_access.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/metadata.hpp"
#include "util/ids.hpp"

namespace memwire::detail {

class CudaStaging;
class PoolState;
class RegistrationTable;

// Per-registration state a transport keeps (e.g. verbs memory regions and the access granted
// to peers): revoke() runs when the registration is revoked, before it finishes, and the state
// is released then.
class TransportState {
 public:
  virtual ~TransportState() = default;
  virtual void revoke() noexcept {}
};

// The core of a passive operation: local memory that remotes may read or write while they
// present the token and stay inside the descriptors, until completed, cancelled or expired.
class Registration final : public OperationCore {
 public:
  Registration(OperationKind kind, std::vector<Descriptor> descriptors, std::int64_t expires_at_ms,
               std::weak_ptr<RegistrationTable> table, std::chrono::milliseconds grace);
  ~Registration() override;

  const Id128& key() const noexcept { return key_; }
  const Id128& token() const noexcept { return token_; }
  const std::vector<Descriptor>& descriptors() const noexcept { return descriptors_; }
  std::int64_t expires_at_ms() const noexcept { return expires_at_ms_.load(); }
  AccessGate& gate() noexcept { return gate_; }
  // What the owner hands out; set by the connector after every transport made its offer, and
  // again (with a later expiry) by renew().
  RdmaMetadata metadata() const;
  void set_metadata(RdmaMetadata metadata);
  // Moves the expiry to `lifetime` from now (never-expiring stays so) and returns the metadata
  // that says so. Throws InvalidArgument (lifetime <= 0), Expired or Cancelled (ended).
  RdmaMetadata renew(std::chrono::milliseconds lifetime);

  // A checked, pinned window into one descriptor. Memory stays valid while `pin` lives.
  struct Access {
    AccessGate::Pin pin;
    std::byte* data;
  };
  // Throws AccessDenied (token, kind, bounds), Expired or Cancelled (revoked).
  Access check_access(const Id128& token, OperationKind kind, std::uint32_t index,
                      std::uint64_t offset, std::uint64_t length, std::string_view transport);
  // check_access in steps, for a request of many pieces: authorize() once (token, kind,
  // expiry), locate() every piece (bounds) before any is touched, then one admit() pins the
  // registration for all of them.
  void authorize(const Id128& token, OperationKind kind) const;
  // Throws AccessDenied unless `token` is this registration's (a pool's: its shared token or a
  // live grant's; PoolState::identify says whose).
  void check_token(const Id128& token) const;
  std::byte* locate(std::uint32_t index, std::uint64_t offset, std::uint64_t length) const;
  AccessGate::Pin admit(std::string_view transport);

  // The active side's completion notice; throws AccessDenied on a wrong token and
  // Cancelled when the registration is no longer live. `acknowledge` (queueing the answer to
  // the active side) runs once the notice is accepted and before the owner is woken.
  void complete_from_remote(const Id128& token, const std::function<void()>& acknowledge = {});
  // The same in steps, for an acknowledgement that takes a while to leave (a whole read's bytes
  // on a socket): claim (throws as above; nothing else may complete or fail it now), then either
  // finish once the acknowledgement is out, or abandon it with the reason it never went.
  void claim_remote_completion(const Id128& token);
  void finish_remote_completion();
  void abandon_remote_completion(Error error);
  // Bytes remote transfers moved in or out of it: each transport counts what it served (verbs,
  // what the active side says it moved). A remote completion needs them to cover every byte
  // registered: a read or write of part of an operation never completes it.
  void note_moved(std::uint64_t bytes) noexcept { moved_bytes_ += bytes; }
  std::uint64_t registered_bytes() const noexcept { return registered_bytes_; }
  // The active side reported a failure (its token is checked), or its connection died.
  void fail_from_remote(const Id128& token, Error error);
  void fail(Error error);

  // CUDA memory: the transports serve the staging's host stand-ins (descriptors()), and a
  // writable copies them to the device before it completes. Set before it is shared.
  void stage_through(std::shared_ptr<const CudaStaging> staging) { staging_ = std::move(staging); }
  // The CUDA memory behind the stand-ins (null for host memory and pools).
  const CudaStaging* staging() const noexcept { return staging_.get(); }

  // A pool (set before it is shared): lives until revoked, serves any number of transfers of
  // the kinds its options allow, and is never completed or failed by a remote. `access` is the
  // same object as `pool` (PoolState implements PoolAccess), which this folder cannot name.
  void make_pool(std::shared_ptr<PoolState> pool, PoolAccess& access) {
    pool_ = std::move(pool);
    pool_access_ = &access;
  }
  std::chrono::milliseconds grace() const noexcept { return grace_; }
  const std::shared_ptr<PoolState>& pool() const noexcept { return pool_; }

  // Counts its bytes as registered (memwire_registered_bytes) until it is revoked.
  void count_registered();

  void attach(std::unique_ptr<TransportState> state);
  // The attached state of type T, or null (never attached, or already revoked).
  template <class T>
  std::shared_ptr<T> attachment() {
    std::lock_guard lock(attachments_mutex_);
    for (const auto& state : attachments_)
      if (auto found = std::dynamic_pointer_cast<T>(state)) return found;
    return nullptr;
  }
  // Withdraws remote access at once: out of the table, gate closed, transport state released.
  // A pool's waits end with Cancelled and `reason` (its owner's, from Pool::close).
  void revoke(std::string_view reason = {});

  // Ends it with "cancelled by its owner" (and `reason`, when given).
  void cancel(std::string reason) override;
  void abandon() override;
  // Pool::close(reason): the same, with the owner's reason for the pool's waits it ends.
  void abandon(std::string_view reason);

 private:
  const Id128 key_ = random_id();
  const Id128 token_ = random_id();
  const std::vector<Descriptor> descriptors_;
  const std::uint64_t registered_bytes_;
  std::atomic<std::uint64_t> moved_bytes_{0};
  std::atomic<std::int64_t> expires_at_ms_;
  const std::weak_ptr<RegistrationTable> table_;
  const std::chrono::milliseconds grace_;
  mutable std::mutex metadata_mutex_;
  std::optional<RdmaMetadata> metadata_;
  AccessGate gate_;
  std::atomic<bool> completing_{false};  // a completion notice was accepted
  std::atomic<bool> cancelling_{false};  // the owner's cancel() began
  std::atomic<bool> counted_registered_{false};
  // Out of the table already: a completed operation's drop revokes again (twice, with the
  // destructor), and each lookup of 16 random bytes among thousands is a cache miss.
  std::atomic<bool> left_table_{false};
  std::mutex attachments_mutex_;
  std::vector<std::shared_ptr<TransportState>> attachments_;
  std::shared_ptr<const CudaStaging> staging_;  // outlives the gate: freed after revoke()
  std::shared_ptr<PoolState> pool_;
  PoolAccess* pool_access_ = nullptr;  // pool_, as core may use it
};

}  // namespace memwire::detail
