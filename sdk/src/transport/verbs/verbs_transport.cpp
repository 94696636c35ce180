#include "transport/verbs/verbs_transport.hpp"

#include <vector>

#include "registration.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"
#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail {
namespace {

// The memory regions of one passive operation. Released when it is revoked (completed,
// cancelled, expired or dropped): a late RDMA access with the old rkeys then fails on the
// device with a remote access error.
struct OfferedRegions final : TransportState {
  explicit OfferedRegions(std::shared_ptr<const verbs::VerbsDevice> owner)
      : device(std::move(owner)) {}
  std::shared_ptr<const verbs::VerbsDevice> device;  // outlives the regions: they use its PD
  std::vector<verbs::Mr> regions;
};

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(const TransportContext& context)
      : engine_(verbs::Engine::create(context)) {}
  ~VerbsTransport() override { engine_->shutdown(); }

  std::string_view name() const override { return "verbs"; }

  TransportOffer offer(Registration& registration) override {
    // Least privilege: a readable operation can only be read remotely, a writable one only
    // written (local write is what the device needs to write into it).
    const int access = registration.kind() == OperationKind::Read
                           ? IBV_ACCESS_REMOTE_READ
                           : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    auto state = std::make_unique<OfferedRegions>(engine_->device());
    TransportOffer offer{"verbs", engine_->address(), {}, {}};
    for (const auto& descriptor : registration.descriptors()) {
      auto region = state->device->register_memory(descriptor.ptr(), descriptor.size(), access);
      offer.keys.push_back(region->rkey);
      state->regions.push_back(std::move(region));
    }
    registration.attach(std::move(state));
    return offer;
  }

  bool can_reach(const TransportOffer& offer) const override {
    return verbs::parse_ipv4_endpoint(offer.address).has_value() && !offer.keys.empty();
  }

  void start(const std::shared_ptr<ActiveTransfer>& transfer,
             const TransportOffer& offer) override {
    engine_->start(transfer, offer);
  }

 private:
  std::shared_ptr<verbs::Engine> engine_;
};

}  // namespace

std::unique_ptr<Transport> make_verbs_transport(const TransportContext& context) {
  return std::make_unique<VerbsTransport>(context);
}

}  // namespace memwire::detail
