#include "memwire/block_grant.hpp"

#include "core/registration.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"
#include "util/peer_name.hpp"

namespace memwire {

BlockGrant::BlockGrant(std::shared_ptr<detail::RequestGrant> grant, PoolMetadata metadata)
    : grant_(std::move(grant)), metadata_(std::make_unique<PoolMetadata>(std::move(metadata))) {}
BlockGrant::BlockGrant(BlockGrant&&) noexcept = default;

BlockGrant& BlockGrant::operator=(BlockGrant&& other) noexcept {
  if (this != &other) {
    close();
    grant_ = std::move(other.grant_);
    pool_ = std::move(other.pool_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

BlockGrant::~BlockGrant() { close(); }

const std::string& BlockGrant::peer() const noexcept { return grant_->peer(); }
const std::string& BlockGrant::request() const noexcept { return grant_->request(); }
std::chrono::steady_clock::time_point BlockGrant::expires_at() const noexcept {
  return grant_->expires_at();
}

std::chrono::steady_clock::time_point BlockGrant::renew(std::chrono::milliseconds extension) {
  if (!grant_) throw Error(ErrorCode::Cancelled, "the grant was moved from");
  return grant_->renew(extension);
}

std::chrono::steady_clock::time_point BlockGrant::renew_limit() const noexcept {
  return grant_->renew_limit();
}

bool BlockGrant::closed() const noexcept { return !grant_ || grant_->released(); }

void BlockGrant::close(std::string_view reason) { end(reason, false); }

bool BlockGrant::expired() {
  if (!grant_) return true;
  if (!grant_->lease_over()) return false;
  end({}, true);  // returns once nothing lands under it any more, as close() does
  return true;
}

void BlockGrant::end(std::string_view reason, bool lease_over) {
  if (!grant_) return;
  if (auto registration = pool_.lock(); registration && registration->pool())
    (void)registration->pool()->release(grant_, reason, lease_over);
  else
    (void)grant_->release(reason, lease_over);  // the pool is gone: nothing reaches its blocks
}

BlockGrant Pool::grant(std::string_view peer, std::string_view request,
                       const std::vector<std::uint64_t>& blocks, Access access,
                       std::chrono::milliseconds lease, std::chrono::milliseconds max_lease) {
  detail::check_peer_name(peer);
  if (auto problem = detail::peer_name_problem(request); !problem.empty())
    throw Error(ErrorCode::InvalidArgument, "a request id with " + std::string(problem));
  auto& registration = this->registration();
  auto& pool = *registration.pool();
  RequestScope scope{std::string(request), access,
                     RequestScope::runs_of(blocks, pool.block_count())};
  auto metadata_scope = scope;
  auto granted = pool.grant_request(std::string(peer), std::move(scope), lease, max_lease,
                                    registration.grace());
  BlockGrant handle(
      granted, pool.metadata().for_request(to_hex(granted->token()), std::move(metadata_scope)));
  handle.pool_ = registration_;
  return handle;
}

}  // namespace memwire
