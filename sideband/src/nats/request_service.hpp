#pragma once

// The request half of the NATS channel: serve() and request() on "<prefix>.get.<name>", queue
// group "memwire". A large writable metadata travels in the parts bucket.

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "memwire/sideband/channel.hpp"
#include "store.hpp"

namespace memwire::sideband::nats_detail {

class NatsRequestService final : public RequestService,
                                 public std::enable_shared_from_this<NatsRequestService> {
 public:
  explicit NatsRequestService(std::shared_ptr<Store> store);
  NatsRequestService(const NatsRequestService&) = delete;
  NatsRequestService& operator=(const NatsRequestService&) = delete;

  // A serve() subscription keeps this service (and so the connection) alive until it ends.
  MEMWIRE_SIDEBAND_REQUEST_SERVICE_OVERRIDES;  // memwire/sideband/channel.hpp

 private:
  // Answers one request of a serve() subscription; never throws.
  std::string answer(natsMsg* message, const RequestHandler& handler);

  std::shared_ptr<Store> store_;
  NatsConnection& connection_;
  std::string service_subject_;  // "<prefix>.get."
};

}  // namespace memwire::sideband::nats_detail
