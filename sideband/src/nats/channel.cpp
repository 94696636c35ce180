#include <utility>

#include "connection.hpp"
#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "registry.hpp"
#include "request_service.hpp"
#include "store.hpp"

namespace memwire::sideband {

using namespace nats_detail;

// One connection, the store over it, and the two halves that share them. The halves hold the
// store (and it the connection), so the connection closes after the last of them is gone: a
// serve() subscription may outlive the channel.
class NatsChannel::Impl {
 public:
  explicit Impl(NatsOptions options)
      : connection(std::make_shared<NatsConnection>(std::move(options))),
        store(std::make_shared<Store>(connection)),
        registry(store),
        service(std::make_shared<NatsRequestService>(store)) {}

  // Runs `call`; a timeout or transport failure during which the server refused something
  // this connection sent is the refusal: Error{AccessDenied} with the server's words, not a
  // wait that ran out.
  template <class Call>
  auto refusals_told(Call call) {
    const auto before = connection->permission_refusals();
    try {
      return call();
    } catch (const Error& error) {
      const bool unexplained =
          error.code() == ErrorCode::Timeout || error.code() == ErrorCode::Transport;
      if (!unexplained || connection->permission_refusals() == before) throw;
      throw Error(ErrorCode::AccessDenied, std::string(error.message()) +
                                               ": the server refused it (" +
                                               connection->last_permission_refusal() + ")");
    }
  }

  std::shared_ptr<NatsConnection> connection;
  std::shared_ptr<Store> store;
  NatsRegistry registry;
  std::shared_ptr<NatsRequestService> service;
};

NatsChannel::NatsChannel(NatsOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

NatsChannel::~NatsChannel() = default;

void NatsChannel::publish(std::string_view name, const RdmaMetadata& metadata,
                          std::chrono::milliseconds ttl) {
  impl_->refusals_told([&] { impl_->registry.publish(name, metadata, ttl); });
}

RdmaMetadata NatsChannel::fetch(std::string_view name, std::chrono::milliseconds timeout) {
  return impl_->refusals_told([&] { return impl_->registry.fetch(name, timeout); });
}

void NatsChannel::withdraw(std::string_view name) {
  impl_->refusals_told([&] { impl_->registry.withdraw(name); });
}

RdmaMetadata NatsChannel::wait_for(std::string_view name, std::chrono::milliseconds timeout,
                                   std::stop_token abandon) {
  return impl_->refusals_told(
      [&] { return impl_->registry.wait_for(name, timeout, std::move(abandon)); });
}

std::vector<std::string> NatsChannel::list() {
  return impl_->refusals_told([&] { return impl_->registry.list(); });
}

void NatsChannel::publish_pool(std::string_view name, const PoolMetadata& metadata,
                               std::chrono::milliseconds ttl) {
  impl_->refusals_told([&] { impl_->registry.publish_pool(name, metadata, ttl); });
}

PoolMetadata NatsChannel::fetch_pool(std::string_view name, std::chrono::milliseconds timeout) {
  return impl_->refusals_told([&] { return impl_->registry.fetch_pool(name, timeout); });
}

PoolMetadata NatsChannel::wait_for_pool(std::string_view name, std::chrono::milliseconds timeout,
                                        std::stop_token abandon) {
  return impl_->refusals_told(
      [&] { return impl_->registry.wait_for_pool(name, timeout, std::move(abandon)); });
}

void NatsChannel::withdraw_pool(std::string_view name) {
  impl_->refusals_told([&] { impl_->registry.withdraw_pool(name); });
}

std::unique_ptr<Subscription> NatsChannel::serve(std::string_view prefix, RequestHandler handler) {
  return impl_->refusals_told([&] { return impl_->service->serve(prefix, std::move(handler)); });
}

void NatsChannel::request(std::string_view name, const RdmaMetadata& writable,
                          std::chrono::milliseconds timeout, std::stop_token abandon) {
  impl_->refusals_told(
      [&] { impl_->service->request(name, writable, timeout, std::move(abandon)); });
}

void NatsChannel::flush(std::chrono::milliseconds timeout) { impl_->connection->flush(timeout); }

std::size_t NatsChannel::max_payload() const { return impl_->connection->max_payload(); }

std::string NatsChannel::connected_url() const { return impl_->connection->connected_url(); }

}  // namespace memwire::sideband
