#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memwire/metadata.hpp"
#include "transport/transport_context.hpp"

namespace memwire::detail {

class ActiveTransfer;
class PoolState;
class Registration;

// The seam between the connector and the ways bytes move. One folder per implementation.
//
// Passive side: offer() makes a registration reachable over this transport (and may attach
// per-registration state to it, e.g. memory regions, released when it is revoked). Remote
// requests are served from the transport's own threads, which look registrations up in the
// context's table and must call Registration::check_access() before touching memory.
//
// Active side: start() begins moving the bytes of a transfer at once (or says the transport
// cannot reach that peer after all: StartResult); the transport then calls
// transfer.succeed() after the passive side acknowledged the completion notice, or
// transfer.fail(); it installs a failure notifier that sends the passive side an error notice.
// Transport threads pin transfer.gate() while they touch local buffers, and never call
// succeed()/fail() while holding such a pin.
// What start() made of a transfer: taken (it succeeds or fails on its own from then on), or
// this transport cannot reach that peer after all (a same-host path the kernel refuses, ...),
// and why: the connector then tries the next. A peer that is gone is no such case: the
// transfer fails (start throws, or fails it).
struct StartResult {
  std::optional<std::string> unusable;

  static StartResult taken() { return {}; }
  static StartResult cannot(std::string why) { return {std::move(why)}; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  virtual TransportOffer offer(Registration& registration) = 0;
  // Whether this end can use the peer's offer (e.g. same host for shm).
  virtual bool can_reach(const TransportOffer& /*offer*/) const { return true; }
  // Whether it moves transfers under a header between pools (TransferRequest::header): offered
  // for pools only when it does.
  virtual bool serves_pools() const { return false; }
  // Why it must not serve this pool (e.g. it can grant peers only whole spans, and the pool's
  // spans hold bytes between blocks), or nullopt: then it is offered for the pool.
  virtual std::optional<std::string> cannot_serve(const PoolState& /*pool*/) const {
    return std::nullopt;
  }
  // What the connector plans around, asked of the transport rather than read from its name:
  // - its peers read registered memory without the owner seeing each read (RDMA READ), so a
  //   readable's CUDA stand-ins must hold the bytes before it is offered;
  virtual bool reads_without_the_owner() const { return false; }
  // - the owner copies GPU memory through CUDA IPC for a peer on its host that asks (for a
  //   one-shot operation only where the offer says so too: kCudaIpcAttribute);
  virtual bool copies_through_cuda_ipc() const { return false; }
  // - peers in other processes can use its offers (false for a transport within one process,
  //   such as a test build's loopback; the conformance suite skips its multi-process cases).
  virtual bool reaches_other_processes() const { return true; }
  [[nodiscard("unusable: the connector must try the next transport")]] virtual StartResult start(
      const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer) = 0;
};

// Builds the named transport; throws Error{Transport} when it cannot run here (no RDMA device,
// ...) and Error{InvalidArgument} for an unknown name.
std::unique_ptr<Transport> make_transport(std::string_view name, const TransportContext& context);

}  // namespace memwire::detail
