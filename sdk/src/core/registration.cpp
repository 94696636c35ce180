#include "core/registration.hpp"

#include <cstdint>
#include <numeric>

#include "core/registration_table.hpp"
#include "cuda/cuda_staging.hpp"
#include "memwire/clock.hpp"

namespace memwire::detail {

Registration::Registration(OperationKind kind, std::vector<Descriptor> descriptors,
                           std::int64_t expires_at_ms, std::weak_ptr<RegistrationTable> table,
                           std::chrono::milliseconds grace)
    : OperationCore(kind, OperationStatus::Initialized),
      descriptors_(std::move(descriptors)),
      registered_bytes_(std::accumulate(
          descriptors_.begin(), descriptors_.end(), std::uint64_t{0},
          [](std::uint64_t sum, const Descriptor& descriptor) { return sum + descriptor.size(); })),
      expires_at_ms_(expires_at_ms),
      table_(std::move(table)),
      grace_(grace) {}

Registration::~Registration() { revoke(); }

void Registration::check_token(const Id128& token) const {
  if (pool_access_) return pool_access_->check_token(token, token_);
  if (!equal_in_constant_time(token, token_))
    throw Error(ErrorCode::AccessDenied, "wrong access token");
}

Registration::Access Registration::check_access(const Id128& token, OperationKind kind,
                                                std::uint32_t index, std::uint64_t offset,
                                                std::uint64_t length, std::string_view transport) {
  authorize(token, kind);
  auto* data = locate(index, offset, length);
  return Access{admit(transport), data};
}

void Registration::authorize(const Id128& token, OperationKind kind) const {
  if (pool_access_) return pool_access_->authorize(token, token_, kind);
  check_token(token);
  if (kind != this->kind())
    throw Error(ErrorCode::AccessDenied,
                "operation allows remote " + std::string(to_string(this->kind())) + " only");
  if (const auto expires = expires_at_ms_.load(); expires != 0 && unix_now_ms() > expires)
    throw Error(ErrorCode::Expired, "metadata expired");
}

std::byte* Registration::locate(std::uint32_t index, std::uint64_t offset,
                                std::uint64_t length) const {
  if (index >= descriptors_.size())
    throw Error(ErrorCode::AccessDenied,
                "descriptor index " + std::to_string(index) + " out of range");
  const auto size = descriptors_[index].size();
  if (length == 0 || offset > size || length > size - offset)
    throw Error(ErrorCode::AccessDenied, "range [" + std::to_string(offset) + ", +" +
                                             std::to_string(length) + ") outside descriptor of " +
                                             std::to_string(size) + " bytes");
  return static_cast<std::byte*>(descriptors_[index].ptr()) + offset;
}

AccessGate::Pin Registration::admit(std::string_view transport) {
  auto pin = gate_.pin();
  if (!pin) throw Error(ErrorCode::Cancelled, "operation no longer accepts remote access");
  if (status() == OperationStatus::Initialized) {
    set_transport(std::string(transport));
    mark_in_progress();
  }
  return std::move(*pin);
}

RdmaMetadata Registration::metadata() const {
  std::lock_guard lock(metadata_mutex_);
  return *metadata_;
}

void Registration::set_metadata(RdmaMetadata metadata) {
  std::lock_guard lock(metadata_mutex_);
  metadata_ = std::move(metadata);
}

RdmaMetadata Registration::renew(std::chrono::milliseconds lifetime) {
  if (lifetime.count() <= 0)
    throw Error(ErrorCode::InvalidArgument, "renew: the lifetime must be positive");
  std::lock_guard lock(metadata_mutex_);
  if (!gate_.is_open() || is_terminal(status()))
    throw Error(ErrorCode::Cancelled, "renew: the operation already ended");
  const auto expires = expires_at_ms_.load();
  if (expires == 0) return *metadata_;
  const auto now = unix_now_ms();
  // Expired access stays expired: readers were already refused, a renewal would mislead.
  if (now > expires) throw Error(ErrorCode::Expired, "renew: the metadata already expired");
  // Saturating: a lifetime of centuries must not wrap into the past.
  const auto renewed = lifetime.count() > INT64_MAX - now ? INT64_MAX : now + lifetime.count();
  expires_at_ms_.store(renewed);
  auto fields = metadata_->fields();
  fields.expires_at_ms = renewed;
  metadata_.emplace(std::move(fields));
  return *metadata_;
}

void Registration::complete_from_remote(const Id128& token,
                                        const std::function<void()>& acknowledge) {
  claim_remote_completion(token);
  // Acknowledged before the owner wakes up: an owner that exits at once must not take the
  // acknowledgement down with it.
  if (acknowledge) acknowledge();
  finish_remote_completion();
}

void Registration::claim_remote_completion(const Id128& token) {
  check_token(token);
  if (pool_) throw Error(ErrorCode::InvalidArgument, "a pool is never completed by a transfer");
  if (const auto moved = moved_bytes_.load(); moved < registered_bytes_)
    throw Error(ErrorCode::InvalidArgument,
                "the transfer moved " + std::to_string(moved) + " of the " +
                    std::to_string(registered_bytes_) +
                    " bytes this operation registered: a read or write of part of an operation "
                    "does not complete it (its metadata described less than the owner offered)");
  if (!gate_.is_open() || is_terminal(status()) || completing_.exchange(true))
    throw Error(ErrorCode::Cancelled, "operation already ended on the owner's side");
  // The written bytes reach the device before the writer hears they landed.
  if (staging_ && kind() == OperationKind::Write && !staging_->written_on_device()) {
    try {
      staging_->copy_to_device();
    } catch (const Error& error) {
      revoke();
      finish(OperationStatus::Errored, error);
      throw;
    }
  }
}

void Registration::finish_remote_completion() {
  // Revoked before finishing: an owner woken by Complete may free its memory at once.
  revoke();
  finish(OperationStatus::Complete);
}

void Registration::abandon_remote_completion(Error error) {
  completing_ = false;
  fail(std::move(error));
}

void Registration::fail_from_remote(const Id128& token, Error error) {
  check_token(token);
  if (pool_) return;  // one peer's failed transfer does not end a pool that serves many
  fail(std::move(error));
}

void Registration::fail(Error error) {
  if (pool_) return;  // only its owner ends a pool
  // The completion notice was accepted and acknowledged: a reader that leaves at once (its
  // other connections closing) must not turn that into a failure before it lands.
  if (completing_) return;
  // The owner is cancelling: the peer's failure that its revocation provokes (a READ meeting
  // an invalidated key, its Abort) must not end it as Errored first.
  if (cancelling_) return;
  revoke();
  finish(OperationStatus::Errored, std::move(error));
}

void Registration::attach(std::unique_ptr<TransportState> state) {
  std::lock_guard lock(attachments_mutex_);
  attachments_.push_back(std::move(state));
}

void Registration::count_registered() {
  if (observation().telemetry && !counted_registered_.exchange(true))
    observation().telemetry->registered(observation().bytes);
}

void Registration::revoke(std::string_view reason) {
  // A pool's own transfers stop touching its memory first; its waiters hear it closed.
  if (pool_access_) pool_access_->close(grace_, reason);
  if (counted_registered_.exchange(false))
    observation().telemetry->unregistered(observation().bytes);
  if (!left_table_.exchange(true))
    if (auto table = table_.lock()) table->erase(key_);
  gate_.close(grace_);
  std::vector<std::shared_ptr<TransportState>> released;
  {
    std::lock_guard lock(attachments_mutex_);
    released.swap(attachments_);
  }
  for (const auto& state : released) state->revoke();
}

void Registration::cancel(std::string reason) {
  if (!cancel_applies()) return;
  cancelling_ = true;
  revoke();
  finish(OperationStatus::Cancelled,
         Error(ErrorCode::Cancelled,
               "cancelled by its owner" + (reason.empty() ? std::string() : ": " + reason)));
}

void Registration::abandon() { abandon(std::string_view()); }

void Registration::abandon(std::string_view reason) {
  revoke(reason);
  // Ended already (the usual drop): no error to make for a finish() that would refuse it.
  if (is_terminal(status())) return;
  finish(OperationStatus::Cancelled, Error(ErrorCode::Cancelled, "dropped by its owner"));
}

}  // namespace memwire::detail
