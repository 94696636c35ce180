#include "transport/verbs/verbs_transport.hpp"

#include <vector>

#include "registration.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"
#include "transport/verbs/rail_offer.hpp"
#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail {
namespace {

// The memory regions of one passive operation, on every rail. Released when it is revoked
// (completed, cancelled, expired or dropped): a late RDMA access with the old rkeys then fails
// on the device with a remote access error.
struct OfferedRegions final : TransportState {
  std::vector<std::shared_ptr<const verbs::VerbsDevice>> devices;  // outlive the regions (PDs)
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
    auto state = std::make_unique<OfferedRegions>();
    TransportOffer offer{"verbs", {}, {}, {}};
    for (std::size_t rail = 0; rail < engine_->rail_count(); ++rail) {
      const auto& device = engine_->device(rail);
      state->devices.push_back(device);
      std::vector<std::uint64_t> keys;
      for (const auto& descriptor : registration.descriptors()) {
        auto region = device->register_memory(descriptor.ptr(), descriptor.size(), access);
        keys.push_back(region->rkey);
        state->regions.push_back(std::move(region));
      }
      verbs::add_rail(offer, rail, engine_->address(rail), keys);
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
