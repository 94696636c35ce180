#include "transport/verbs/access_grant.hpp"

#include <cerrno>
#include <cstring>

#include "memwire/error.hpp"
#include "telemetry/telemetry_recorder.hpp"
#include "transport/verbs/progress_loop.hpp"
#include "util/ids.hpp"

namespace memwire::detail::verbs {
namespace {

// How long invalidate() waits, once it asked for the connection to close, for the progress
// thread to close it: it answers in microseconds, unless it is blocked on the caller (a
// callback of the owner's waiting for this thread), which must not hang both.
constexpr auto kCloseWait = std::chrono::seconds(5);

// Unspecified: a pool that allows both.
int remote_access(OperationKind kind) {
  switch (kind) {
    case OperationKind::Read:
      return IBV_ACCESS_REMOTE_READ;
    case OperationKind::Write:
      return IBV_ACCESS_REMOTE_WRITE;
    default:
      return IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  }
}

}  // namespace

void KeyBudget::take(std::size_t count) {
  auto held = held_.load();
  do {
    if (limit_ != 0 && (count > limit_ || held > limit_ - count)) {
      if (telemetry_) telemetry_->grant_refused();
      throw Error(ErrorCode::Transport,
                  "verbs: this connector holds " + std::to_string(held) +
                      " remote keys (memory windows or regions) for its peers and " +
                      std::to_string(count) + " more would pass its limit of " +
                      std::to_string(limit_) +
                      " (rdma.max_remote_keys, MEMWIRE_RDMA_MAX_REMOTE_KEYS): finish or close "
                      "some operations or pools first");
    }
  } while (!held_.compare_exchange_weak(held, held + count));
}

UnboundWindows UnboundWindows::allocate(const VerbsDevice& device, std::size_t count) {
  // A random 8-bit key in each rkey: a peer that saw one window's keys cannot predict the next
  // binding's.
  UnboundWindows prepared;
  const auto random = random_id();
  for (std::size_t index = 0; index < count; ++index) {
    Mw window(ibv_alloc_mw(device.pd(), IBV_MW_TYPE_2));
    if (!window)
      throw Error(ErrorCode::Transport, "cannot allocate a memory window on " + device.name() +
                                            ": " + std::strerror(errno));
    prepared.keys.push_back((window->rkey & ~0xffu) | random[index % random.size()]);
    prepared.windows.push_back(std::move(window));
  }
  return prepared;
}

namespace {

// Per descriptor, the key of its run (0 for an empty one).
std::vector<std::uint32_t> keys_by_descriptor(const DescriptorRuns& runs,
                                              const std::vector<std::uint32_t>& run_keys) {
  std::vector<std::uint32_t> keys;
  keys.reserve(runs.run_of.size());
  for (const auto run : runs.run_of)
    keys.push_back(run == DescriptorRuns::kNone ? 0 : run_keys[run]);
  return keys;
}

}  // namespace

std::shared_ptr<AccessGrant> AccessGrant::windows(std::shared_ptr<const BindableRegions> regions,
                                                  OperationKind kind,
                                                  std::shared_ptr<KeyBudget> budget,
                                                  UnboundWindows prepared) {
  std::shared_ptr<AccessGrant> grant(new AccessGrant());
  if (budget) {
    budget->take(regions->regions.size());  // given back by the grant's release, whatever happens
    grant->budget_ = std::move(budget);
    grant->keys_ = regions->regions.size();
  }
  grant->window_access_ = remote_access(kind);
  if (prepared.windows.size() != regions->regions.size())
    prepared = UnboundWindows::allocate(*regions->device, regions->regions.size());
  grant->windows_ = std::move(prepared.windows);
  grant->window_keys_ = std::move(prepared.keys);
  grant->rkeys_ = keys_by_descriptor(regions->runs, grant->window_keys_);
  grant->window_count_ = grant->windows_.size();
  grant->binds_ = grant->window_count_ > 0;
  grant->bindable_ = std::move(regions);
  return grant;
}

std::shared_ptr<AccessGrant> AccessGrant::own_regions(std::shared_ptr<const VerbsDevice> device,
                                                      std::shared_ptr<ibv_pd> pd,
                                                      const std::vector<Descriptor>& descriptors,
                                                      OperationKind kind,
                                                      std::shared_ptr<KeyBudget> budget) {
  std::shared_ptr<AccessGrant> grant(new AccessGrant());
  const auto runs = runs_of(descriptors);
  if (budget) {
    budget->take(runs.runs.size());
    grant->budget_ = std::move(budget);
    grant->keys_ = runs.runs.size();
  }
  // A writable region needs local write for the device to write into it.
  const int access = kind == OperationKind::Read ? IBV_ACCESS_REMOTE_READ
                                                 : remote_access(kind) | IBV_ACCESS_LOCAL_WRITE;
  std::vector<std::uint32_t> run_keys;
  for (const auto& run : runs.runs) {
    auto region = device->register_memory(pd.get(), run.ptr(), run.size(), access);
    run_keys.push_back(region->rkey);
    grant->own_.push_back(std::move(region));
  }
  grant->rkeys_ = keys_by_descriptor(runs, run_keys);
  grant->pd_ = std::move(pd);
  grant->device_ = std::move(device);
  return grant;
}

std::shared_ptr<AccessGrant> AccessGrant::ranges(
    std::shared_ptr<const BindableRegions> regions, std::shared_ptr<const VerbsDevice> device,
    std::shared_ptr<ibv_pd> own_pd, const std::vector<Descriptor>& descriptors,
    const std::vector<Range>& ranges, OperationKind kind, std::shared_ptr<KeyBudget> budget) {
  if (own_pd) {
    // A region per range, registered in the connection's own PD.
    std::vector<Descriptor> parts;
    parts.reserve(ranges.size());
    for (const auto& range : ranges)
      parts.emplace_back(static_cast<std::byte*>(descriptors.at(range.index).ptr()) + range.offset,
                         range.length);
    return own_regions(std::move(device), std::move(own_pd), parts, kind, std::move(budget));
  }
  if (!regions) throw Error(ErrorCode::Transport, "verbs: the pool was not offered on this rail");
  for (const auto& range : ranges)
    if (range.index >= regions->runs.run_of.size() ||
        regions->runs.run_of[range.index] == DescriptorRuns::kNone)
      throw Error(ErrorCode::Transport, "verbs: a granted range outside the pool's regions");
  std::shared_ptr<AccessGrant> grant(new AccessGrant());
  if (budget) {
    budget->take(ranges.size());
    grant->budget_ = std::move(budget);
    grant->keys_ = ranges.size();
  }
  grant->window_access_ = remote_access(kind);
  auto windows = UnboundWindows::allocate(*regions->device, ranges.size());
  grant->windows_ = std::move(windows.windows);
  grant->window_keys_ = std::move(windows.keys);
  grant->rkeys_ = grant->window_keys_;
  grant->window_count_ = grant->windows_.size();
  grant->binds_ = !ranges.empty();
  grant->ranges_ = ranges;
  grant->bindable_ = std::move(regions);
  return grant;
}

AccessGrant::~AccessGrant() {
  std::lock_guard lock(mutex_);
  release_locked();
}

bool AccessGrant::prepare_bind(std::size_t index, ibv_send_wr& wr) {
  std::lock_guard lock(mutex_);
  if (invalidated_ || index >= windows_.size() || !windows_[index]) return false;
  const auto& runs = bindable_->runs;
  // A window per run of the descriptors, or per granted range of blocks within one of them.
  const auto run = ranges_.empty() ? index : runs.run_of[ranges_[index].index];
  const auto& region = bindable_->regions[run];
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = windows_[index].get();
  wr.bind_mw.rkey = window_keys_[index];
  wr.bind_mw.bind_info.mr = region.get();
  wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(region->addr);
  wr.bind_mw.bind_info.length = region->length;
  if (!ranges_.empty()) {  // exactly the granted run of blocks
    const auto& range = ranges_[index];
    wr.bind_mw.bind_info.addr += runs.offset_in_run[range.index] + range.offset;
    wr.bind_mw.bind_info.length = range.length;
  }
  wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(window_access_);
  ++binds_in_flight_;
  return true;
}

void AccessGrant::bind_completed() noexcept {
  std::lock_guard lock(mutex_);
  if (binds_in_flight_ > 0) --binds_in_flight_;
  if (invalidated_ && binds_in_flight_ == 0) release_locked();
  binds_done_.notify_all();
}

void AccessGrant::invalidate() noexcept { invalidate_each({this}); }

void AccessGrant::invalidate_all(const std::vector<std::shared_ptr<AccessGrant>>& grants) noexcept {
  std::vector<AccessGrant*> each;
  for (const auto& grant : grants)
    if (grant) each.push_back(grant.get());
  invalidate_each(std::move(each));
}

void AccessGrant::invalidate_each(std::vector<AccessGrant*> grants) noexcept {
  using Clock = std::chrono::steady_clock;
  std::vector<AccessGrant*> bound;
  for (auto* grant : grants)
    if (grant->end()) bound.push_back(grant);
  if (bound.empty()) return;
  if (ProgressLoop::runs_work_here()) {
    // It cannot wait for itself: the close comes later, unless the binds complete first.
    for (auto* grant : bound) grant->request_close(Clock::now() + kBindWait);
    return;
  }
  // One deadline for every grant: n stalled binds cost one wait, not n.
  const auto deadline = Clock::now() + kBindWait;
  std::erase_if(bound, [&](AccessGrant* grant) { return grant->await_binds(deadline); });
  for (auto* grant : bound) grant->request_close(Clock::now());
  const auto closed_by = Clock::now() + kCloseWait;
  for (auto* grant : bound) grant->await_binds(closed_by);
}

bool AccessGrant::end() noexcept {
  std::lock_guard lock(mutex_);
  if (!invalidated_) invalidated_at_ = std::chrono::steady_clock::now();
  invalidated_ = true;
  if (binds_in_flight_ == 0) release_locked();
  return binds_in_flight_ > 0;
}

bool AccessGrant::await_binds(std::chrono::steady_clock::time_point deadline) noexcept {
  std::unique_lock lock(mutex_);
  binds_done_.wait_until(lock, deadline, [&] { return binds_in_flight_ == 0; });
  if (binds_in_flight_ > 0) return false;
  release_locked();
  return true;
}

void AccessGrant::request_close(std::chrono::steady_clock::time_point deadline) noexcept {
  std::function<void()> close;
  {
    std::lock_guard lock(mutex_);
    close_deadline_ = deadline;
    close = close_connection_;
  }
  if (!close) return;
  try {
    close();  // a no-op once the engine is gone: it closed every connection as it went
  } catch (...) {
  }
}

void AccessGrant::on_stalled_bind(std::function<void()> close) {
  std::lock_guard lock(mutex_);
  close_connection_ = std::move(close);
}

std::chrono::steady_clock::time_point AccessGrant::close_deadline() const noexcept {
  std::lock_guard lock(mutex_);
  return close_deadline_;
}

bool AccessGrant::binding() const noexcept {
  std::lock_guard lock(mutex_);
  return binds_in_flight_ > 0;
}

std::chrono::steady_clock::time_point AccessGrant::invalidated_at() const noexcept {
  std::lock_guard lock(mutex_);
  return invalidated_at_;
}

void AccessGrant::connection_closed() noexcept {
  std::lock_guard lock(mutex_);
  if (!invalidated_) invalidated_at_ = std::chrono::steady_clock::now();
  invalidated_ = true;
  binds_in_flight_ = 0;
  release_locked();
  binds_done_.notify_all();
}

bool AccessGrant::invalidated() const noexcept {
  std::lock_guard lock(mutex_);
  return invalidated_;
}

void AccessGrant::release_locked() noexcept {
  // Windows first: a region with a window bound to it cannot be deregistered.
  windows_.clear();
  own_.clear();
  // The bindable regions pin the operation's pages: they go with the last grant over them.
  bindable_.reset();
  if (budget_) budget_->give_back(keys_);
  keys_ = 0;
}

}  // namespace memwire::detail::verbs
