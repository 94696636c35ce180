#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/status.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail::verbs {

// One passive operation's memory regions on one rail, registered for window binds only
// (IBV_ACCESS_MW_BIND): they carry no usable remote key of their own.
struct BindableRegions {
  std::shared_ptr<const VerbsDevice> device;  // outlives the regions (its PD)
  std::vector<Mr> regions;                    // one per descriptor; null for an empty one
};

// Remote access to one registration's memory for the one connection whose peer presented the
// token, and for no other: the NIC enforces it. Two ways, by what the device can do:
// - windows: a type-2 memory window per descriptor, bound by a work request on that
//   connection's QP (so usable from that QP alone), over the registration's bindable regions;
// - own regions: the descriptors registered with remote access in the connection's own
//   protection domain, which no other QP shares (devices without type-2 windows).
// invalidate() ends the access on any thread: at once, or, for a window whose bind is still in
// the device's queue (deallocating it then would break the QP), when that bind completes. Off
// the progress thread it waits for that completion (bounded): the device has usually run the
// bind already (the peer holds its keys), only the progress thread has not read it yet, and
// the window must not outlive the call. On the progress thread the CQ is read in order, so a
// bind posted before the notice being handled has been read already.
class AccessGrant {
 public:
  static std::shared_ptr<AccessGrant> windows(std::shared_ptr<const BindableRegions> regions,
                                              OperationKind kind);
  static std::shared_ptr<AccessGrant> own_regions(std::shared_ptr<const VerbsDevice> device,
                                                  std::shared_ptr<ibv_pd> pd,
                                                  const std::vector<Descriptor>& descriptors,
                                                  OperationKind kind);
  ~AccessGrant();
  AccessGrant(const AccessGrant&) = delete;
  AccessGrant& operator=(const AccessGrant&) = delete;

  // The remote keys the peer uses, one per descriptor (0 for an empty one).
  const std::vector<std::uint32_t>& rkeys() const noexcept { return rkeys_; }
  // Whether windows must be bound on the QP before the keys work (not for own regions).
  bool binds() const noexcept { return binds_; }

  // Fills `wr` with the bind of window `index`; false when the grant ended meanwhile (nothing
  // to post) or that window is empty. Counts the bind as in flight until bind_completed().
  bool prepare_bind(std::size_t index, ibv_send_wr& wr);
  void bind_completed() noexcept;
  // Ends remote access (see above). Idempotent.
  void invalidate() noexcept;
  // The QP is destroyed: no bind of it will run, every window may go now.
  void connection_closed() noexcept;
  bool invalidated() const noexcept;

 private:
  AccessGrant() = default;
  void release_locked() noexcept;

  mutable std::mutex mutex_;
  std::condition_variable binds_done_;
  int window_access_ = 0;
  std::shared_ptr<const BindableRegions> bindable_;  // windows: outlive them
  std::shared_ptr<const VerbsDevice> device_;        // own regions: outlive them (its context)
  std::shared_ptr<ibv_pd> pd_;                       // own regions: outlives them
  std::vector<Mr> own_;
  std::vector<Mw> windows_;
  bool binds_ = false;
  std::vector<std::uint32_t> rkeys_;
  unsigned binds_in_flight_ = 0;
  bool invalidated_ = false;
};

}  // namespace memwire::detail::verbs
