#include "memwire/pool.hpp"

#include "active_transfer.hpp"
#include "memwire/error.hpp"
#include "peer_name.hpp"
#include "pool_state.hpp"
#include "registration.hpp"

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
  if (!registration_) throw Error(ErrorCode::InvalidArgument, "pool was moved from or closed");
  return *registration_;
}

PoolMetadata Pool::metadata() const { return registration().pool()->metadata(); }

PoolMetadata Pool::metadata_for(std::string_view peer) {
  detail::check_peer_name(peer);
  auto& pool = *registration().pool();
  const auto shared = pool.metadata();
  return PoolMetadata(shared.name(), shared.generation(), shared.regions(), shared.key(),
                      shared.endpoint(), to_hex(pool.grant(std::string(peer))));
}

bool Pool::revoke(std::string_view peer) { return registration().pool()->revoke(peer); }

std::uint64_t Pool::peer_faults() const { return registration().pool()->faults(); }
std::uint64_t Pool::block_count() const { return registration().pool()->block_count(); }

void* Pool::block(std::uint64_t index) const {
  const auto& pool = *registration().pool();
  const auto place = pool.locate(index);
  return static_cast<std::byte*>(pool.regions()[place.region].base) + place.offset;
}

Notification Pool::next_notification(std::chrono::milliseconds timeout) {
  return registration().pool()->next(timeout);
}

Notification Pool::wait_for_tag(std::string_view tag, std::chrono::milliseconds timeout,
                                std::string_view from) {
  return registration().pool()->wait_for_tag(tag, timeout, from);
}

void Pool::on_notification(std::function<void(const Notification&)> callback) {
  registration().pool()->on_notification(std::move(callback));
}

std::size_t Pool::queued_notifications() const { return registration().pool()->queued(); }

void Pool::close() {
  // Revoked (peers refused, its own transfers failed and waited for) before the memory is the
  // caller's again.
  if (auto registration = std::move(registration_)) registration->abandon();
}

void BlockTransfer::cancel(std::string_view reason) {
  core();
  static_cast<detail::ActiveTransfer&>(*core_).cancel(std::string(reason));
}

}  // namespace memwire
