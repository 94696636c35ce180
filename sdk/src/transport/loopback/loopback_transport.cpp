// loopback: a transport between connectors of one process, built only for tests
// (transport.cmake). The active side finds the owner's registrations through a table of this
// process's loopback transports and copies on the calling thread: begin_read and begin_write
// return with the transfer ended. No other process. Pools in host memory too, with nothing of
// the owner's side written here: their admission and end are the owner's floor's (owner/),
// which is what a new transport gets for pools (issue 51).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/active_transfer.hpp"
#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "cuda/cuda_staging.hpp"
#include "memwire/error.hpp"
#include "owner/pool_facts.hpp"
#include "owner/pool_request.hpp"
#include "owner/transfer_claim.hpp"
#include "owner/transfer_end.hpp"
#include "transport/enabled_transports.hpp"
#include "transport/transport.hpp"
#include "util/fork_generation.hpp"
#include "util/ids.hpp"

namespace memwire::detail {
namespace {

constexpr const char* kName = "loopback";

// This process's loopback transports by address (what their offers name): each one's
// connector's registrations. Never destroyed: a connector may outlive static destruction.
class Directory {
 public:
  static Directory& instance() {
    static auto* directory = new Directory;
    return *directory;
  }
  void add(const std::string& address, std::weak_ptr<RegistrationTable> registrations) {
    std::lock_guard lock(mutex_);
    tables_[address] = std::move(registrations);
  }
  void remove(const std::string& address) {
    std::lock_guard lock(mutex_);
    tables_.erase(address);
  }
  std::shared_ptr<RegistrationTable> find(const std::string& address) const {
    std::lock_guard lock(mutex_);
    const auto found = tables_.find(address);
    return found == tables_.end() ? nullptr : found->second.lock();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::weak_ptr<RegistrationTable>> tables_;
};

// Which process an offer comes from: a forked child, whose memory is a copy of its parent's,
// is another one.
std::string this_process() {
  static const std::string id = to_hex(random_id());
  return id + "." + std::to_string(fork_generation());
}

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(const TransportContext& context)
      : connector_name_(context.connector_name) {
    Directory::instance().add(address_, context.registrations);
  }
  ~LoopbackTransport() override { Directory::instance().remove(address_); }

  std::string_view name() const override { return kName; }
  TransportOffer offer(Registration& /*registration*/) override {
    return {kName, address_, {}, {{"process", this_process()}}};
  }
  bool can_reach(const TransportOffer& offer) const override {
    const auto process = offer.attributes.find("process");
    return process != offer.attributes.end() && process->second == this_process();
  }
  bool reaches_other_processes() const override { return false; }
  bool serves_pools() const override { return true; }
  std::optional<std::string> cannot_serve(const PoolState& pool) const override {
    if (gpu_memory(pool)) return std::string("loopback moves host memory only");
    return std::nullopt;
  }

  StartResult start(const std::shared_ptr<ActiveTransfer>& transfer,
                    const TransportOffer& offer) override {
    try {
      const auto registrations = Directory::instance().find(offer.address);
      if (!registrations)
        throw Error(ErrorCode::PeerLost, "the loopback owner at " + offer.address + " is gone");
      const auto& header = transfer->request().header;
      const auto registration = claimed_registration(
          *registrations, {transfer->key(), header.has_value(), header ? header->generation : 0});
      if (header) {
        copy_blocks(*transfer, registration, *header);
      } else {
        copy(*transfer, registration);
      }
      transfer->succeed();
    } catch (const Error& error) {
      transfer->fail(error);  // the owner hears it through the failure notifier, as over a wire
    }
    return StartResult::taken();
  }

 private:
  // Checks every descriptor against the owner's registration before a byte moves, copies them
  // in chunks, each under fresh pins of both sides, then completes the owner's operation.
  static void copy(ActiveTransfer& transfer, const std::shared_ptr<Registration>& registration) {
    transfer.set_failure_notifier([weak = std::weak_ptr(registration),
                                   token = transfer.token()](const Error& error) {
      const auto owner = weak.lock();
      if (!owner) return;
      try {
        owner->fail_from_remote(
            token, Error(error.code(), std::string("the active side reported: ") + error.what()));
      } catch (const Error&) {  // a forged token: the owner hears nothing of it
      }
    });
    const auto& local = transfer.local();
    registration->authorize(transfer.token(), transfer.kind());
    std::vector<std::byte*> remote;
    for (std::uint32_t i = 0; i < local.size(); ++i)
      remote.push_back(registration->locate(i, 0, local[i].size()));
    for (std::size_t i = 0; i < local.size(); ++i)
      move(transfer, *registration, static_cast<std::byte*>(local[i].ptr()), remote[i],
           local[i].size());
    // no pin held here: completing revokes, which waits for the owner's
    registration->complete_from_remote(transfer.token());
  }

  // A transfer between pools: each request's admission and the transfer's end are the owner's
  // floor's, as for every transport; this moves the bytes.
  void copy_blocks(ActiveTransfer& transfer, const std::shared_ptr<Registration>& registration,
                   const TransferHeader& header) const {
    const auto& segments = transfer.request().segments;
    if (transfer.request().cuda_ipc || transfer.lands_on_device())
      throw Error(ErrorCode::InvalidArgument, "loopback moves host memory only");
    std::vector<BlockPiece> pieces;
    pieces.reserve(segments.size());
    for (const auto& segment : segments)
      pieces.push_back({segment.remote_region, segment.remote_offset, segment.length});
    const auto kind = transfer.kind();
    auto admitted = admit_pool_request(*registration, transfer.token(), kind, pieces);
    const auto move_all = [&] {
      for (const auto& segment : segments)
        move(transfer, *registration, segment.local,
             registration->locate(segment.remote_region, segment.remote_offset, segment.length),
             segment.length);
    };
    const auto& tag = header.tag;
    if (tag.empty()) return move_all();  // nothing follows it that the owner must vouch for
    const auto peer =
        requesting_peer(*registration, transfer.token(), admitted.grant, connector_name_, serial_);
    open_under_grant(admitted.grant, tag, kind);
    std::optional<Error> failure;
    try {
      move_all();
    } catch (const Error& error) {
      failure = error;
    }
    admitted.grant_pin.reset();  // the bytes are in (or out): the grant's release may go on
    if (auto refused = end_admitted_transfer(*registration->pool(), peer, tag, kind, admitted.grant,
                                             std::move(failure)))
      throw *refused;
  }

  // Copies `length` bytes between `here` (the transfer's) and `there` (the owner's) in chunks,
  // each under fresh pins of both sides: a cancel on either side waits for one chunk, not the
  // whole copy (admit() refuses once the owner revoked, the local gate once the transfer ended).
  static void move(ActiveTransfer& transfer, Registration& registration, std::byte* here,
                   std::byte* there, std::size_t length) {
    const bool reading = transfer.kind() == OperationKind::Read;
    for (std::size_t at = 0; at == 0 || at < length; at += kChunk) {
      const auto owner_pin = registration.admit(kName);
      const auto local_pin = transfer.gate().pin();
      if (!local_pin) throw Error(ErrorCode::Cancelled, "the transfer ended during its copy");
      if (const auto* staging = registration.staging(); staging && reading)
        staging->fill_host_once();  // a GPU readable's stand-ins, filled at its first read
      const auto part = std::min(kChunk, length - at);
      copy_apart(reading ? here + at : there + at, reading ? there + at : here + at, part);
      registration.note_moved(part);
    }
  }

  // The copy of a transport: by the kernel (process_vm_writev into this process), as shm's and
  // a NIC's are, out of sight of this process's threads. Peers may read and write one pool
  // block at once (a flood of both, in the conformance suite): that is the pool user's affair,
  // not a race of the transport's for a sanitizer to report. Overlapping ranges, or a kernel
  // that refuses: memmove.
  static void copy_apart(std::byte* to, const std::byte* from, std::size_t length) {
    const bool overlap = to < from + length && from < to + length;
    if (!overlap) {
      const iovec source{const_cast<std::byte*>(from), length};
      const iovec target{to, length};
      if (::process_vm_writev(::getpid(), &source, 1, &target, 1, 0) ==
          static_cast<ssize_t>(length))
        return;
    }
    std::memmove(to, from, length);
  }

  // Large enough that the pins cost nothing beside the copy, small enough that a cancel waits
  // for a millisecond's copy (under TSan, a whole 256 MiB one took over a second).
  static constexpr std::size_t kChunk = std::size_t{1} << 20;

  const std::string address_ = to_hex(random_id());
  const std::string connector_name_;  // what a pool's owner hears its peer call itself
  // This transport's number as a pool's peer, which shared-token peers' shares are kept by.
  const std::uint64_t serial_ = next_serial();
  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> last{0};
    return ++last;
  }
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(const TransportContext& context) {
  return std::make_unique<LoopbackTransport>(context);
}

}  // namespace memwire::detail
