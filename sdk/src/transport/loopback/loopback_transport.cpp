// loopback: a transport between connectors of one process, built only for tests
// (transport.cmake). The active side finds the owner's registrations through a table of this
// process's loopback transports and copies on the calling thread: begin_read and begin_write
// return with the transfer ended. One-shot operations only (no pools), no other process.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/active_transfer.hpp"
#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "cuda/cuda_staging.hpp"
#include "memwire/error.hpp"
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
  explicit LoopbackTransport(const TransportContext& context) {
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

  StartResult start(const std::shared_ptr<ActiveTransfer>& transfer,
                    const TransportOffer& offer) override {
    try {
      copy(*transfer, offer.address);
      transfer->succeed();
    } catch (const Error& error) {
      transfer->fail(error);  // the owner hears it through the failure notifier, as over a wire
    }
    return StartResult::taken();
  }

 private:
  // Checks every descriptor against the owner's registration before a byte moves, copies them
  // in chunks, each under fresh pins of both sides, then completes the owner's operation.
  static void copy(ActiveTransfer& transfer, const std::string& address) {
    const auto registrations = Directory::instance().find(address);
    if (!registrations)
      throw Error(ErrorCode::PeerLost, "the loopback owner at " + address + " is gone");
    auto registration = registrations->find(transfer.key());
    // A pool is never offered over loopback: its key names nothing here.
    if (!registration || registration->pool())
      throw Error(ErrorCode::NotFound, "no live operation has this key");
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
    const bool reading = transfer.kind() == OperationKind::Read;
    const auto& local = transfer.local();
    registration->authorize(transfer.token(), transfer.kind());
    std::vector<std::byte*> remote;
    for (std::uint32_t i = 0; i < local.size(); ++i)
      remote.push_back(registration->locate(i, 0, local[i].size()));
    for (std::size_t i = 0; i < local.size(); ++i) {
      auto* here = static_cast<std::byte*>(local[i].ptr());
      for (std::size_t at = 0; at == 0 || at < local[i].size(); at += kChunk) {
        // A cancel on either side waits for one chunk, not the whole copy: admit() refuses
        // once the owner revoked, the local gate once the transfer ended.
        const auto owner_pin = registration->admit(kName);
        const auto local_pin = transfer.gate().pin();
        if (!local_pin) throw Error(ErrorCode::Cancelled, "the transfer ended during its copy");
        if (const auto* staging = registration->staging(); staging && reading)
          staging->fill_host_once();  // a GPU readable's stand-ins, filled at its first read
        const auto length = std::min(kChunk, local[i].size() - at);
        std::memmove(reading ? here + at : remote[i] + at, reading ? remote[i] + at : here + at,
                     length);
        registration->note_moved(length);
      }
    }  // no pin held here: completing revokes, which waits for the owner's
    registration->complete_from_remote(transfer.token());
  }

  // Large enough that the pins cost nothing beside the copy, small enough that a cancel waits
  // for a millisecond's copy (under TSan, a whole 256 MiB one took over a second).
  static constexpr std::size_t kChunk = std::size_t{1} << 20;

  const std::string address_ = to_hex(random_id());
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(const TransportContext& context) {
  return std::make_unique<LoopbackTransport>(context);
}

}  // namespace memwire::detail
