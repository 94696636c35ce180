// Threads other than the progress thread running the engine (see Engine::drive and
// Engine::start): under TCG and on small machines, each thread woken on the way (completion
// channel -> progress thread -> condition variable -> waiter) costs about as much as the
// transfer's own round trip.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <vector>

#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail::verbs {
namespace {

// A transfer up to this size is polled for by its waiter: its completion comes within about a
// round trip. A larger one's waiter sleeps on the completion channels.
constexpr std::uint64_t kMostBytesPolledFor = 64 << 10;
// Waits longer than this teach the poll nothing: the peer was slow, or it was not small after all.
constexpr std::chrono::milliseconds kLongestTypicalWait{2};

}  // namespace

void Engine::watch_completions(bool watched) {
  for (const auto& rail : rails_) loop_.set_watched(rail->completions->fd, watched);
}

Engine::BorrowedWork::BorrowedWork(Engine& engine, std::optional<std::uint64_t> beginning)
    : engine_(engine), beginning_(beginning), work_(engine.loop_.try_take_work()) {
  if (work_) engine_.watch_completions(false);
}

Engine::BorrowedWork::~BorrowedWork() {
  if (!work_) return;
  try {
    // The progress thread handles what was left (come_back_later), as it would have: after
    // this returns.
    for (const auto& rail : engine_.rails_) engine_.on_completions(*rail, beginning_);
    engine_.after_handler();
  } catch (const std::exception&) {
  }
  engine_.watch_completions(true);
}

void Engine::poll_every_queue() {
  for (const auto& [id, connection] : connections_)
    if (connection->state != Connection::State::Closed && connection->cq() != nullptr)
      polled_.push_back(connection);
  for (const auto& connection : polled_) drain(*connection);
  polled_.clear();
}

void Engine::come_back_later(Connection& connection) {
  const bool queued = !left_over_.empty();
  if (std::find(left_over_.begin(), left_over_.end(), connection.id()) == left_over_.end())
    left_over_.push_back(connection.id());
  if (queued) return;
  run_on_loop([this] { drain_left_over(); });
}

void Engine::drain_left_over() {
  // Only the queues that had more, not every connection's: a flooding peer's next turn costs
  // its own queue, however many idle connections there are. Those found again queue the next.
  std::swap(left_over_, draining_);
  for (auto* id : draining_)
    if (auto found = connections_.find(id); found != connections_.end()) {
      const auto keep = found->second;
      if (keep->state != Connection::State::Closed) drain(*keep);
    }
  draining_.clear();
}

bool Engine::drive(std::uint64_t bytes, const std::atomic<bool>& settled,
                   std::chrono::steady_clock::time_point spin_until,
                   std::chrono::steady_clock::time_point until) {
  const auto entered = std::chrono::steady_clock::now();
  BorrowedWork work(*this, std::nullopt);
  if (!work || loop_.stopping()) return false;
  const bool small = bytes <= kMostBytesPolledFor;
  if (small) spin_until = std::max(spin_until, entered + typical_small_wait_ * 3 / 2);
  // Besides the completion channels, it watches rdma_cm events (a transfer's first connection
  // coming up) and commands (a cancel's Abort): the progress thread, woken by those too, waits
  // for the work.
  std::vector<pollfd> watched;
  for (const auto& rail : rails_) watched.push_back({rail->completions->fd, POLLIN, 0});
  const auto cm_events = watched.size();
  watched.push_back({events_->fd, POLLIN, 0});
  const auto commands = watched.size();
  watched.push_back({loop_.commands_fd(), POLLIN, 0});
  bool commands_queued = true;
  for (unsigned round = 1;; ++round) {
    // As the loop does: a failure is reported to the transfers concerned, and an exception
    // escaping a handler (a bug) must not end the wait.
    try {
      if (commands_queued) loop_.run_commands();
      poll_every_queue();
      after_handler();
    } catch (const std::exception&) {
    }
    if (settled.load(std::memory_order_acquire) || loop_.stopping()) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) break;
    commands_queued = false;
    if (now < spin_until) {  // the queues again at once; a command or a cm event now and then
      if (round % 16 == 0 && ::poll(watched.data() + cm_events, 2, 0) > 0) {
        commands_queued = watched[commands].revents != 0;
        if (watched[cm_events].revents != 0) on_cm_events();
      }
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
    const timespec timeout{static_cast<time_t>(left.count() / 1'000'000'000),
                           static_cast<long>(left.count() % 1'000'000'000)};
    for (auto& entry : watched) entry.revents = 0;
    if (::ppoll(watched.data(), watched.size(), &timeout, nullptr) < 0 && errno != EINTR) break;
    try {
      for (std::size_t rail = 0; rail < rails_.size(); ++rail)
        if (watched[rail].revents != 0) on_completions(*rails_[rail]);
      if (watched[cm_events].revents != 0) on_cm_events();
    } catch (const std::exception&) {
    }
    commands_queued = watched[commands].revents != 0;
  }
  const auto waited = std::chrono::steady_clock::now() - entered;
  if (small && settled.load(std::memory_order_acquire) && waited < kLongestTypicalWait)
    typical_small_wait_ +=
        (std::chrono::duration_cast<std::chrono::nanoseconds>(waited) - typical_small_wait_) / 8;
  return true;
}

}  // namespace memwire::detail::verbs
