#pragma once

// A request grant (memwire::BlockGrant) as the binding holds it: grants.cpp binds it,
// layers.cpp hands it to a LayerReceiver.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "pool.hpp"

namespace memwire_python {

// Keeps the grant's metadata after the grant itself went to a LayerReceiver (take()), so that
// Python may still hand it to the peer. Dropping it closes the grant, without the GIL (a
// close waits for requests under way to finish landing).
class PyGrant {
 public:
  explicit PyGrant(memwire::BlockGrant grant)
      : metadata_{grant.metadata()}, peer_(grant.peer()), request_(grant.request()) {
    grant_ = std::make_unique<memwire::BlockGrant>(std::move(grant));
  }
  ~PyGrant() { end_native(grant_, birth_); }
  PyGrant(const PyGrant&) = delete;
  PyGrant& operator=(const PyGrant&) = delete;

  const PoolMeta& metadata() const { return metadata_; }
  const std::string& peer() const { return peer_; }
  const std::string& request() const { return request_; }
  // Seconds until the lease ends (negative once it has); None once given to a receiver.
  std::optional<double> expires_in() const {
    if (!grant_) return std::nullopt;
    return seconds_from_now(grant_->expires_at());
  }
  // Seconds from now to the latest end renew() may give the lease; None once given away.
  std::optional<double> renew_limit_in() const {
    if (!grant_) return std::nullopt;
    return seconds_from_now(grant_->renew_limit());
  }
  // BlockGrant::renew: seconds until the new end.
  double renew(std::int64_t extension_ms) {
    if (!grant_)
      throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                           "the grant for request " + request_ + " is held by a LayerReceiver");
    return seconds_from_now(grant_->renew(std::chrono::milliseconds(extension_ms)));
  }
  bool closed() const { return !grant_ || grant_->closed(); }
  bool held_by_receiver() const { return taken_; }
  // BlockGrant::expired(): true once the lease ended and nothing lands under it any more.
  bool expired() {
    if (!grant_) return closed();  // held by a receiver: not this handle's to say
    return without_gil([&] { return grant_->expired(); });
  }
  void close(const std::string& reason) {
    if (!grant_) return;
    without_gil([&] {
      grant_->close(reason);
      return 0;
    });
  }
  // For LayerReceiver(pool, grant, stream): the grant moves there (its cancel() closes it).
  memwire::BlockGrant take() {
    if (!grant_ || grant_->closed())
      throw memwire::Error(memwire::ErrorCode::InvalidArgument,
                           "the grant for request " + request_ +
                               " was closed or is held by a LayerReceiver already");
    auto grant = std::move(*grant_);
    grant_.reset();
    taken_ = true;
    return grant;
  }

 private:
  static double seconds_from_now(std::chrono::steady_clock::time_point when) {
    return std::chrono::duration<double>(when - std::chrono::steady_clock::now()).count();
  }
  ForkBirth birth_;
  PoolMeta metadata_;
  std::string peer_;
  std::string request_;
  bool taken_ = false;
  std::unique_ptr<memwire::BlockGrant> grant_;
};

}  // namespace memwire_python
