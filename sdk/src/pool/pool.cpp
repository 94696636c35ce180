#include "memwire/pool.hpp"

#include "core/registration.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"
#include "util/peer_name.hpp"

namespace memwire {

Pool::Pool(std::shared_ptr<detail::Registration> registration)
    : registration_(std::move(registration)) {}
Pool::Pool(Pool&&) noexcept = default;

Pool& Pool::operator=(Pool&& other) noexcept {
  if (this != &other) {
    close();
    registration_ = std::move(other.registration_);
  }
  return *this;
}

Pool::~Pool() { close(); }

detail::Registration& Pool::registration() const {
  // Only its owner ends a pool's registration: ended means closed.
  if (!registration_ || is_terminal(registration_->status()))
    throw Error(ErrorCode::InvalidArgument, "pool was moved from or closed");
  return *registration_;
}

PoolMetadata Pool::metadata() const { return registration().pool()->metadata(); }

PoolMetadata Pool::metadata_for(std::string_view peer) {
  detail::check_peer_name(peer);
  auto& pool = *registration().pool();
  auto fields = pool.metadata().fields();
  fields.token = to_hex(pool.grant(std::string(peer)));
  return PoolMetadata(std::move(fields));
}

bool Pool::revoke(std::string_view peer) { return registration().pool()->revoke(peer); }

std::uint64_t Pool::peer_faults() const { return registration().pool()->faults(); }
std::uint64_t Pool::refusals() const { return registration().pool()->refusals(); }
std::uint64_t Pool::block_count() const { return registration().pool()->block_count(); }

void* Pool::block(std::uint64_t index) const {
  const auto& pool = *registration().pool();
  const auto place = pool.locate(index);
  return static_cast<std::byte*>(pool.regions()[place.region].base) + place.offset;
}

detail::PoolState& Pool::waitable() const {
  // A wait that begins after close() ends as those in flight did, with the close's reason.
  if (registration_ && is_terminal(registration_->status()))
    registration_->pool()->refuse_if_closed();
  return *registration().pool();
}

Notification Pool::next_notification(std::chrono::milliseconds timeout) {
  return waitable().next(timeout);
}

Notification Pool::wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                                std::string_view from, TagKinds kinds) {
  return waitable().wait_for_tag(tag, timeout, {from, {}, kinds});
}

std::optional<Notification> Pool::try_next_notification() { return waitable().try_next(); }

std::optional<Notification> Pool::try_wait_for_tag(std::string_view tag, std::string_view from,
                                                   TagKinds kinds) {
  return waitable().try_wait_for_tag(tag, {from, {}, kinds});
}

int Pool::notification_fd() { return waitable().readiness_fd(); }

void Pool::on_notification(std::function<void(const Notification&)> callback) {
  registration().pool()->on_notification(std::move(callback));
}

std::size_t Pool::queued_notifications() const { return registration().pool()->queued(); }

void Pool::close(std::string_view reason) {
  // Revoked (peers refused, its own transfers failed and waited for) before the memory is the
  // caller's again. The registration itself stays until the Pool goes: a wait in another
  // thread still stands on it, and hears Cancelled.
  if (registration_) registration_->abandon(reason);
}

}  // namespace memwire
