#include "transport/verbs/access_grant.hpp"

#include <cerrno>
#include <cstring>

#include "ids.hpp"
#include "memwire/error.hpp"
#include "transport/verbs/progress_loop.hpp"

namespace memwire::detail::verbs {
namespace {

// How long invalidate() waits for a bind's completion to be read: a progress thread answers in
// microseconds; a QP stuck this long is about to break, which ends the wait anyway.
constexpr auto kBindWait = std::chrono::seconds(2);

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

std::shared_ptr<AccessGrant> AccessGrant::windows(std::shared_ptr<const BindableRegions> regions,
                                                  OperationKind kind) {
  std::shared_ptr<AccessGrant> grant(new AccessGrant());
  grant->window_access_ = remote_access(kind);
  // A random 8-bit key in each window's rkey: a peer that saw one window's keys cannot
  // predict the next binding's.
  const auto random = random_id();
  for (std::size_t index = 0; index < regions->regions.size(); ++index) {
    if (!regions->regions[index]) {
      grant->windows_.emplace_back();
      grant->rkeys_.push_back(0);
      continue;
    }
    Mw window(ibv_alloc_mw(regions->device->pd(), IBV_MW_TYPE_2));
    if (!window)
      throw Error(ErrorCode::Transport, "cannot allocate a memory window on " +
                                            regions->device->name() + ": " + std::strerror(errno));
    const std::uint32_t key = random[index % random.size()];
    grant->rkeys_.push_back((window->rkey & ~0xffu) | key);
    grant->windows_.push_back(std::move(window));
    grant->binds_ = true;
  }
  grant->bindable_ = std::move(regions);
  return grant;
}

std::shared_ptr<AccessGrant> AccessGrant::own_regions(std::shared_ptr<const VerbsDevice> device,
                                                      std::shared_ptr<ibv_pd> pd,
                                                      const std::vector<Descriptor>& descriptors,
                                                      OperationKind kind) {
  std::shared_ptr<AccessGrant> grant(new AccessGrant());
  // A writable region needs local write for the device to write into it.
  const int access = kind == OperationKind::Read ? IBV_ACCESS_REMOTE_READ
                                                 : remote_access(kind) | IBV_ACCESS_LOCAL_WRITE;
  for (const auto& descriptor : descriptors) {
    if (descriptor.size() == 0) {
      grant->own_.emplace_back();
      grant->rkeys_.push_back(0);
      continue;
    }
    auto region = device->register_memory(pd.get(), descriptor.ptr(), descriptor.size(), access);
    grant->rkeys_.push_back(region->rkey);
    grant->own_.push_back(std::move(region));
  }
  grant->pd_ = std::move(pd);
  grant->device_ = std::move(device);
  return grant;
}

AccessGrant::~AccessGrant() {
  std::lock_guard lock(mutex_);
  release_locked();
}

bool AccessGrant::prepare_bind(std::size_t index, ibv_send_wr& wr) {
  std::lock_guard lock(mutex_);
  if (invalidated_ || index >= windows_.size() || !windows_[index]) return false;
  const auto& region = bindable_->regions[index];
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = windows_[index].get();
  wr.bind_mw.rkey = rkeys_[index];
  wr.bind_mw.bind_info.mr = region.get();
  wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(region->addr);
  wr.bind_mw.bind_info.length = region->length;
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

void AccessGrant::invalidate() noexcept {
  std::unique_lock lock(mutex_);
  invalidated_ = true;
  if (binds_in_flight_ > 0 && !ProgressLoop::on_a_progress_thread())
    binds_done_.wait_for(lock, kBindWait, [&] { return binds_in_flight_ == 0; });
  if (binds_in_flight_ == 0) release_locked();
}

void AccessGrant::connection_closed() noexcept {
  std::lock_guard lock(mutex_);
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
}

}  // namespace memwire::detail::verbs
