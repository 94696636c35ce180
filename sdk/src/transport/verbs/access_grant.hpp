#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "memwire/descriptor.hpp"
#include "memwire/status.hpp"
#include "transport/verbs/descriptor_runs.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail {
class TelemetryRecorder;
}

namespace memwire::detail::verbs {

// The remote keys (memory windows, per-connection regions) one connector holds for its peers,
// one-shot operations and pools alike: each costs the device's memory, which every peer shares,
// so their total is capped (ConnectorOptions::rdma.max_remote_keys; 0 = no cap). Any thread.
class KeyBudget {
 public:
  KeyBudget(std::size_t limit, std::shared_ptr<TelemetryRecorder> telemetry)
      : limit_(limit), telemetry_(std::move(telemetry)) {}
  // Takes `count` keys, or throws Error{Transport} naming the limit (and counts the refusal).
  void take(std::size_t count);
  void give_back(std::size_t count) noexcept { held_.fetch_sub(count); }
  std::size_t held() const noexcept { return held_.load(); }

 private:
  const std::size_t limit_;
  const std::shared_ptr<TelemetryRecorder> telemetry_;
  std::atomic<std::size_t> held_{0};
};

// One passive operation's memory regions on one rail, registered for window binds only
// (IBV_ACCESS_MW_BIND): they carry no usable remote key of their own. One per run of its
// descriptors (DescriptorRuns): a window covers a run, and its key serves each descriptor in it.
struct BindableRegions {
  std::shared_ptr<const VerbsDevice> device;  // outlives the regions (its PD)
  DescriptorRuns runs;
  std::vector<Mr> regions;  // one per run
};

// Memory windows allocated ahead of a grant, with the keys they are to be bound with: unbound,
// they give access to nothing. An offer prepares them, so that a reader's Begin does not wait
// for their allocation.
struct UnboundWindows {
  std::vector<Mw> windows;
  std::vector<std::uint32_t> keys;
  // Throws Error{Transport} when the device has no more windows.
  static UnboundWindows allocate(const VerbsDevice& device, std::size_t count);
};

// Remote access to one registration's memory for the one connection whose peer presented the
// token, and for no other: the NIC enforces it. Two ways, by what the device can do:
// - windows: a type-2 memory window per run of descriptors, bound by a work request on that
//   connection's QP (so usable from that QP alone), over the registration's bindable regions;
// - own regions: each run of descriptors registered with remote access in the connection's own
//   protection domain, which no other QP shares (devices without type-2 windows).
// invalidate() ends the access on any thread: at once, or, for a window whose bind is still in
// the device's queue (deallocating it then would break the QP), when that bind completes. A
// thread not running the engine waits for that completion: the device has usually run the bind
// already (the peer holds its keys), only the engine has not read it yet. A bind that
// does not complete within kBindWait sits behind work the peer stalls (a SEND it posts no
// receive for: RC retries that forever), and the window may be bound all the same: the
// connection is closed (destroying its QP destroys its windows) before invalidate() returns,
// so an ended grant never leaves a key that works. A thread running the engine (its progress
// thread, or a waiter that took its work), which cannot wait for itself, has the same close
// happen kBindWait later unless the bind completed by then.
class AccessGrant {
 public:
  static constexpr std::chrono::seconds kBindWait{2};

  // Bytes [offset, offset + length) of descriptor `index`: what one window of a request grant
  // covers (a run of consecutive granted blocks).
  struct Range {
    std::size_t index = 0;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
  };

  // Each takes its keys from `budget` (null: uncounted) and gives them back once released.
  // `prepared`: windows allocated ahead (one per region), else they are allocated now.
  static std::shared_ptr<AccessGrant> windows(std::shared_ptr<const BindableRegions> regions,
                                              OperationKind kind,
                                              std::shared_ptr<KeyBudget> budget = nullptr,
                                              UnboundWindows prepared = {});
  // A window (or, with `own_pd`, a region in that PD) per range instead of per run:
  // rkeys() has one key per range, and nothing outside the ranges is reachable.
  static std::shared_ptr<AccessGrant> ranges(std::shared_ptr<const BindableRegions> regions,
                                             std::shared_ptr<const VerbsDevice> device,
                                             std::shared_ptr<ibv_pd> own_pd,
                                             const std::vector<Descriptor>& descriptors,
                                             const std::vector<Range>& ranges, OperationKind kind,
                                             std::shared_ptr<KeyBudget> budget = nullptr);
  static std::shared_ptr<AccessGrant> own_regions(std::shared_ptr<const VerbsDevice> device,
                                                  std::shared_ptr<ibv_pd> pd,
                                                  const std::vector<Descriptor>& descriptors,
                                                  OperationKind kind,
                                                  std::shared_ptr<KeyBudget> budget = nullptr);
  ~AccessGrant();
  AccessGrant(const AccessGrant&) = delete;
  AccessGrant& operator=(const AccessGrant&) = delete;

  // The remote keys the peer uses, one per descriptor (0 for an empty one); descriptors of one
  // run share theirs.
  const std::vector<std::uint32_t>& rkeys() const noexcept { return rkeys_; }
  // Whether windows must be bound on the QP before the keys work (not for own regions).
  bool binds() const noexcept { return binds_; }
  // How many windows it binds (one per run, or per range).
  std::size_t window_count() const noexcept { return window_count_; }

  // Fills `wr` with the bind of window `index`; false when the grant ended meanwhile (nothing
  // to post). Counts the bind as in flight until bind_completed().
  bool prepare_bind(std::size_t index, ibv_send_wr& wr);
  void bind_completed() noexcept;
  // Ends remote access (see above). Idempotent.
  void invalidate() noexcept;
  // invalidate() for many at once: every grant ends first, then all wait for their binds
  // under one deadline, then the connections of those still bound close together.
  static void invalidate_all(const std::vector<std::shared_ptr<AccessGrant>>& grants) noexcept;
  // The QP is destroyed: no bind of it will run, every window may go now.
  void connection_closed() noexcept;
  bool invalidated() const noexcept;
  // When invalidate() first ran (the epoch while it has not).
  std::chrono::steady_clock::time_point invalidated_at() const noexcept;

  // How to close this grant's connection if its binds stall: `close`, callable on any thread,
  // closes it on the progress thread at close_deadline() unless the binds completed by then.
  // Set once, before any bind is posted.
  void on_stalled_bind(std::function<void()> close);
  std::chrono::steady_clock::time_point close_deadline() const noexcept;
  // Whether a bind is posted and not yet completed (nor its connection closed).
  bool binding() const noexcept;

 private:
  AccessGrant() = default;
  void release_locked() noexcept;
  // invalidate()'s first step: ends the grant; true when a bind still holds a window.
  bool end() noexcept;
  // Waits for the binds in flight until `deadline`; true when none is left.
  bool await_binds(std::chrono::steady_clock::time_point deadline) noexcept;
  // Asks for the connection to close at `deadline` if a bind is still in flight then.
  void request_close(std::chrono::steady_clock::time_point deadline) noexcept;
  static void invalidate_each(std::vector<AccessGrant*> grants) noexcept;

  mutable std::mutex mutex_;
  std::condition_variable binds_done_;
  int window_access_ = 0;
  std::shared_ptr<const BindableRegions> bindable_;  // windows: outlive them
  std::shared_ptr<const VerbsDevice> device_;        // own regions: outlive them (its context)
  std::shared_ptr<ibv_pd> pd_;                       // own regions: outlives them
  std::vector<Mr> own_;
  std::vector<Mw> windows_;
  std::vector<std::uint32_t> window_keys_;  // what each window is bound with
  std::vector<Range> ranges_;               // per window, when it covers part of its region only
  bool binds_ = false;
  std::size_t window_count_ = 0;
  std::vector<std::uint32_t> rkeys_;
  unsigned binds_in_flight_ = 0;
  bool invalidated_ = false;
  std::chrono::steady_clock::time_point invalidated_at_{};
  std::function<void()> close_connection_;
  std::chrono::steady_clock::time_point close_deadline_{};
  std::shared_ptr<KeyBudget> budget_;
  std::size_t keys_ = 0;  // taken from budget_, until released
};

}  // namespace memwire::detail::verbs
