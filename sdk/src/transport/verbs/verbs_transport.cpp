#include "transport/verbs/verbs_transport.hpp"

#include <vector>

#include "core/registration.hpp"
#include "owner/pool_facts.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"
#include "transport/verbs/offered_access.hpp"
#include "transport/verbs/rail_offer.hpp"
#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail {
namespace {

// A pool's memory registered once for this side's own transfers (the local side of
// read_blocks / write_blocks), held while the pool lives: transfers find it in the rail's
// LocalMrCache instead of registering their blocks each time.
class PoolLocalRegions final : public TransportState {
 public:
  std::vector<std::shared_ptr<const ibv_mr>> regions;
  void revoke() noexcept override { regions.clear(); }
};

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(const TransportContext& context)
      : engine_(verbs::Engine::create(context)) {}
  ~VerbsTransport() override { engine_->shutdown(); }

  std::string_view name() const override { return "verbs"; }

  TransportOffer offer(Registration& registration) override {
    // No remote key leaves in the metadata: peers are granted keys per connection once they
    // present the token (offered_access.hpp). Where the device binds windows, the memory is
    // registered now for binds only (a window of a readable allows remote read alone, of a
    // writable remote write alone; local write is what the device needs to write into it).
    const int access = registration.kind() == OperationKind::Read && !registration.pool()
                           ? IBV_ACCESS_MW_BIND
                           : IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE;
    TransportOffer offer{"verbs", {}, {}, {}};
    std::vector<std::shared_ptr<const verbs::BindableRegions>> rails;
    std::vector<verbs::UnboundWindows> prepared(engine_->rail_count());
    for (std::size_t rail = 0; rail < engine_->rail_count(); ++rail) {
      verbs::add_rail(offer, rail, engine_->address(rail));
      if (!engine_->grants_windows(rail)) {
        rails.push_back(nullptr);
        continue;
      }
      auto regions = std::make_shared<verbs::BindableRegions>();
      regions->device = engine_->device(rail);
      regions->runs = verbs::runs_of(registration.descriptors());
      for (const auto& run : regions->runs.runs)
        regions->regions.push_back(regions->device->register_memory(run.ptr(), run.size(), access));
      // A one-shot operation's windows, unbound until its reader's Begin: allocated now, off
      // the reader's path. A pool's grants come once per connection: each allocates its own.
      if (!registration.pool())
        prepared[rail] = verbs::UnboundWindows::allocate(*regions->device, regions->regions.size());
      rails.push_back(std::move(regions));
    }
    registration.attach(std::make_unique<verbs::OfferedAccess>(
        std::move(rails), engine_->key_budget(), engine_->forget_grants_of(registration.key()),
        std::move(prepared)));
    if (registration.pool()) {
      auto local = std::make_unique<PoolLocalRegions>();
      for (std::size_t rail = 0; rail < engine_->rail_count(); ++rail)
        for (const auto& region : registration.descriptors())
          local->regions.push_back(engine_->rail(rail).local_regions.acquire(
              region.ptr(), region.size(), IBV_ACCESS_LOCAL_WRITE));
      registration.attach(std::move(local));
    }
    return offer;
  }

  // A pool's keys are granted to a connection once (its first Begin binds them) and kept until
  // the pool goes; each transfer still announces itself (Begin, answered with the keys held),
  // moves its bytes one-sided, and ends with Done, which carries the tag.
  bool serves_pools() const override { return true; }
  // Keys (windows or regions) cover a region's whole span: a pool whose spans hold bytes that
  // are no block's would expose them to every peer it grants. Such a pool moves over tcp and
  // shm, which check every piece against the blocks. (Windows per run of blocks would close
  // this at one bind per run per connection: 2,000 for one strided 2,000-block region.)
  std::optional<std::string> cannot_serve(const PoolState& pool) const override {
    // GPUDirect RDMA (ibv_reg_dmabuf_mr over cuMemGetHandleForAddressRange) is the next step:
    // off until a machine with an RDMA NIC beside the GPU can test it. Tcp and shm serve it.
    if (gpu_memory(pool))
      return std::string(
          "its blocks are in GPU memory, and GPUDirect RDMA is off in this build "
          "(not tested on a GPU with an RDMA NIC)");
    if (!has_gaps(pool)) return std::nullopt;
    return "its regions leave bytes between blocks that verbs keys (whole spans) would expose";
  }

  // RDMA READ: the owner's CPU never sees a peer's read.
  bool reads_without_the_owner() const override { return true; }

  bool can_reach(const TransportOffer& offer) const override {
    return verbs::parse_ipv4_endpoint(offer.address).has_value() && offer.keys.empty();
  }

  StartResult start(const std::shared_ptr<ActiveTransfer>& transfer,
                    const TransportOffer& offer) override {
    engine_->start(transfer, offer);  // what goes wrong from here fails the transfer
    return StartResult::taken();
  }

 private:
  std::shared_ptr<verbs::Engine> engine_;
};

}  // namespace

std::unique_ptr<Transport> make_verbs_transport(const TransportContext& context) {
  return std::make_unique<VerbsTransport>(context);
}

}  // namespace memwire::detail
