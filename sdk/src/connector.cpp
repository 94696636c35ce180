#include "memwire/connector.hpp"

#include <unistd.h>

#include <climits>

#include "active_transfer.hpp"
#include "clock.hpp"
#include "memwire/error.hpp"
#include "registration.hpp"
#include "registration_table.hpp"
#include "transport/transport.hpp"

namespace memwire {
namespace {

std::string local_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// Descriptors of one side: non-empty, no null or empty ranges, one memory kind, memory that
// the started transports can touch.
void check_local(const std::vector<Descriptor>& local) {
  if (local.empty()) throw Error(ErrorCode::InvalidArgument, "no descriptors");
  for (std::size_t i = 0; i < local.size(); ++i) {
    const auto& descriptor = local[i];
    const auto where = "descriptor " + std::to_string(i);
    if (descriptor.ptr() == nullptr) throw Error(ErrorCode::InvalidArgument, where + " is null");
    if (descriptor.size() == 0) throw Error(ErrorCode::InvalidArgument, where + " is empty");
    if (descriptor.device().kind() != local.front().device().kind())
      throw Error(ErrorCode::InvalidArgument, "all descriptors must share one memory kind");
    if (descriptor.device().kind() != DeviceKind::Host)
      throw Error(ErrorCode::InvalidArgument, where + " is " + descriptor.device().to_string() +
                                                  " memory: this build moves host memory only");
  }
}

// Remote and local descriptors pair by index and must match exactly in size.
void check_pairing(OperationKind wanted, const RdmaMetadata& remote,
                   const std::vector<Descriptor>& local) {
  if (remote.operation_kind() != wanted) {
    const bool reading = wanted == OperationKind::Read;
    throw Error(ErrorCode::Pairing, std::string(reading ? "a read" : "a write") +
                                        " needs the metadata of a " +
                                        (reading ? "readable" : "writable") + " operation, got a " +
                                        (reading ? "writable" : "readable") + " one");
  }
  const auto& remote_descriptors = remote.descriptors();
  if (remote_descriptors.size() != local.size())
    throw Error(ErrorCode::SizeMismatch, "remote has " + std::to_string(remote_descriptors.size()) +
                                             " descriptors, local has " +
                                             std::to_string(local.size()));
  for (std::size_t i = 0; i < local.size(); ++i)
    if (remote_descriptors[i].size != local[i].size())
      throw Error(ErrorCode::SizeMismatch, "descriptor " + std::to_string(i) + ": remote " +
                                               std::to_string(remote_descriptors[i].size) +
                                               " bytes, local " + std::to_string(local[i].size()) +
                                               " bytes");
  if (remote.expires_at_ms() != 0 && unix_now_ms() > remote.expires_at_ms())
    throw Error(ErrorCode::Expired, "remote metadata expired");
}

}  // namespace

class Connector::Impl {
 public:
  explicit Impl(ConnectorOptions options) {
    context_.connector_name = options.name.empty() ? to_hex(random_id()) : options.name;
    context_.hostname = local_hostname();
    context_.options = std::move(options);
    context_.registrations = std::make_shared<detail::RegistrationTable>();
    for (const auto& name : context_.options.transports) {
      try {
        transports_.push_back(detail::make_transport(name, context_));
      } catch (const Error& error) {
        log("transport " + name + " not started: " + error.what());
      }
    }
    if (transports_.empty()) throw Error(ErrorCode::Transport, "no transport could start");
  }

  ~Impl() { context_.registrations->revoke_all(); }

  const std::string& name() const noexcept { return context_.connector_name; }
  const std::string& hostname() const noexcept { return context_.hostname; }

  std::vector<std::string> transport_names() const {
    std::vector<std::string> names;
    for (const auto& transport : transports_) names.emplace_back(transport->name());
    return names;
  }

  std::shared_ptr<detail::Registration> create_passive(OperationKind kind,
                                                       std::vector<Descriptor> local) {
    check_local(local);
    const auto ttl = context_.options.metadata_ttl;
    const std::int64_t expires = ttl.count() > 0 ? unix_now_ms() + ttl.count() : 0;
    auto registration = std::make_shared<detail::Registration>(
        kind, std::move(local), expires, context_.registrations, context_.options.connect_timeout);
    Endpoint endpoint{name(), hostname(), {}};
    // A transport that cannot serve this memory (verbs registration refused, ...) is left out;
    // the others still offer it.
    std::string refusals;
    for (const auto& transport : transports_) {
      try {
        endpoint.transports.push_back(transport->offer(*registration));
      } catch (const Error& error) {
        log("transport " + std::string(transport->name()) +
            " cannot offer this memory: " + error.what());
        refusals += std::string(refusals.empty() ? "" : "; ") + error.what();
      }
    }
    if (endpoint.transports.empty())
      throw Error(ErrorCode::Transport, "no transport can offer this memory (" + refusals + ")");
    std::vector<RemoteDescriptor> described;
    for (const auto& descriptor : registration->descriptors())
      described.push_back({descriptor.device(), reinterpret_cast<std::uintptr_t>(descriptor.ptr()),
                           descriptor.size()});
    registration->set_metadata(RdmaMetadata(kind, std::move(described), to_hex(registration->key()),
                                            std::move(endpoint), to_hex(registration->token()),
                                            expires));
    context_.registrations->insert(registration);
    return registration;
  }

  std::shared_ptr<detail::ActiveTransfer> begin_active(OperationKind kind,
                                                       const RdmaMetadata& remote,
                                                       std::vector<Descriptor> local) {
    check_local(local);
    check_pairing(kind, remote, local);
    auto transfer = std::make_shared<detail::ActiveTransfer>(kind, std::move(local), remote,
                                                             context_.options.connect_timeout);
    // Best shared transport first; one that cannot reach the peer after all (shm refused by the
    // kernel, ...) gives way to the next, with the reason logged.
    std::string refusals;
    for (auto [transport, offer] : candidates(remote.endpoint())) {
      try {
        transfer->set_transport(std::string(transport->name()));
        transport->start(transfer, *offer);
        return transfer;
      } catch (const Error& error) {
        if (error.code() != ErrorCode::Transport) throw;
        log("transport " + std::string(transport->name()) +
            " unusable, trying the next: " + error.what());
        refusals += std::string(refusals.empty() ? "" : "; ") + error.what();
      }
    }
    throw Error(ErrorCode::Transport, no_shared_transport(remote.endpoint()) +
                                          (refusals.empty() ? "" : " (" + refusals + ")"));
  }

 private:
  // Transports both ends run, in the remote's order of preference (best first).
  std::vector<std::pair<detail::Transport*, const TransportOffer*>> candidates(
      const Endpoint& remote) {
    std::vector<std::pair<detail::Transport*, const TransportOffer*>> shared;
    for (const auto& offer : remote.transports)
      for (const auto& transport : transports_)
        if (transport->name() == offer.name && transport->can_reach(offer))
          shared.emplace_back(transport.get(), &offer);
    return shared;
  }

  std::string no_shared_transport(const Endpoint& remote) const {
    std::string offered, ours;
    for (const auto& offer : remote.transports)
      offered += (offered.empty() ? "" : ", ") + offer.name;
    for (const auto& name : transport_names()) ours += (ours.empty() ? "" : ", ") + name;
    return "no usable transport in common: remote offers [" + offered + "], this connector runs [" +
           ours + "]";
  }

  void log(const std::string& line) const {
    if (context_.options.log) context_.options.log(line);
  }

  detail::TransportContext context_;
  std::vector<std::unique_ptr<detail::Transport>> transports_;
};

Connector::Connector(ConnectorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
Connector::~Connector() = default;

const std::string& Connector::name() const noexcept { return impl_->name(); }
const std::string& Connector::hostname() const noexcept { return impl_->hostname(); }
std::vector<std::string> Connector::transports() const { return impl_->transport_names(); }

ReadableOperation Connector::create_readable(std::vector<Descriptor> local) {
  return ReadableOperation(impl_->create_passive(OperationKind::Read, std::move(local)));
}

WritableOperation Connector::create_writable(std::vector<Descriptor> local) {
  return WritableOperation(impl_->create_passive(OperationKind::Write, std::move(local)));
}

ReadOperation Connector::begin_read(const RdmaMetadata& remote, std::vector<Descriptor> local) {
  return ReadOperation(impl_->begin_active(OperationKind::Read, remote, std::move(local)));
}

WriteOperation Connector::begin_write(std::vector<Descriptor> local, const RdmaMetadata& remote) {
  return WriteOperation(impl_->begin_active(OperationKind::Write, remote, std::move(local)));
}

}  // namespace memwire
