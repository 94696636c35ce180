// The verbs engine between notices, on its progress thread (see verbs_engine.hpp): work
// completions and the device's async events, the timer (connections slow to establish, grants
// whose registration expired), and the faults counted against a source.
#include <sys/timerfd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/registration.hpp"
#include "memwire/clock.hpp"
#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail::verbs {
namespace {

// How long after the owner ended a grant an access error on its connection is a reader that
// was in flight (it hears of the end with its next request, a round trip), not a fault.
constexpr std::chrono::seconds kEndedGrantExcuses{2};

// The loop's turn on completions is bounded: peers that keep their queues full (a flood of
// refused transfers, refilled as fast as they are answered) cannot hold off rdma_cm events (a
// new peer's connection), timers or commands. Events per turn (the channel's fd stays readable
// for the rest) and completions per drain of one queue (come_back_later polls the rest).
constexpr int kMostCompletionEventsPerTurn = 4;
constexpr int kCompletionsPerPoll = 32;
constexpr int kMostCompletionsPerDrain = 2 * kCompletionsPerPoll;

}  // namespace

bool Engine::on_completions(Rail& rail, std::optional<std::uint64_t> beginning) {
  bool left = false;
  for (int handled = 0; handled < kMostCompletionEventsPerTurn; ++handled) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(rail.completions.get(), &cq, &context) != 0) break;  // drained
    // Acknowledged at once: destroying a CQ waits for its events to be acknowledged. A CQ's
    // events cannot be read once it is destroyed, so `context` is a live connection.
    ibv_ack_cq_events(cq, 1);
    auto& connection = *static_cast<Connection*>(context);
    if (connection.state == Connection::State::Closed) continue;
    // Re-armed before polling, so nothing that completes meanwhile goes unnoticed.
    if (ibv_req_notify_cq(cq, 0) != 0) {
      fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_req_notify_cq failed"));
      continue;
    }
    left = drain(connection, beginning) || left;
  }
  return left;
}

void Engine::on_async_events(std::size_t rail) {
  auto* context = rails_[rail]->device->context();
  const auto port = rails_[rail]->device->port();
  for (int count = 0; count < 64; ++count) {
    ibv_async_event event{};
    if (ibv_get_async_event(context, &event) != 0) return;  // drained (EAGAIN)
    const auto type = event.event_type;
    const bool port_lost = (type == IBV_EVENT_PORT_ERR && event.element.port_num == port) ||
                           type == IBV_EVENT_DEVICE_FATAL;
    ibv_ack_async_event(&event);
    if (!port_lost) continue;
    rails_[rail]->failed_at = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Connection>> lost;
    for (const auto& [id, connection] : connections_)
      if (connection->rail == rail) lost.push_back(connection);
    const Error error(ErrorCode::PeerLost, "verbs: " + rails_[rail]->device->name() + " port " +
                                               std::to_string(port) + " went down (" +
                                               ibv_event_type_str(type) + ")");
    for (const auto& connection : lost) fail_connection(*connection, error);
  }
}

bool Engine::drain(Connection& connection, std::optional<std::uint64_t> beginning) {
  if (connection.cq() == nullptr) return false;
  const bool left = drain_some(connection, beginning);
  if (left) come_back_later(connection);
  return left;
}

bool Engine::drain_some(Connection& connection, std::optional<std::uint64_t> beginning) {
  while (!beginning && !connection.unhandled.empty() &&
         connection.state != Connection::State::Closed) {
    const auto completion = connection.unhandled.front();
    connection.unhandled.pop_front();
    handle(connection, completion);
  }
  // What a caller that began `beginning` may handle: nothing that runs another transfer's
  // callbacks.
  const auto allowed = [&](const ibv_wc& completion) {
    if (completion.status != IBV_WC_SUCCESS || !connection.unhandled.empty()) return false;
    const auto tag = Connection::tag_of(completion.wr_id);
    return tag == Connection::Tag::Control || tag == Connection::Tag::Bind ||
           (tag == Connection::Tag::Data &&
            active_.leg_of_transfer(Connection::value_of(completion.wr_id), *beginning));
  };
  ibv_wc completions[kCompletionsPerPoll];
  for (int polled = 0; connection.state != Connection::State::Closed;) {
    if (polled >= kMostCompletionsPerDrain) return true;  // maybe more: polled again later
    const int count = ibv_poll_cq(connection.cq(), kCompletionsPerPoll, completions);
    if (count < 0) {
      fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_poll_cq failed"));
      break;
    }
    if (count == 0) break;
    polled += count;
    for (int i = 0; i < count && connection.state != Connection::State::Closed; ++i) {
      if (beginning && !allowed(completions[i]))
        connection.unhandled.push_back(completions[i]);
      else
        handle(connection, completions[i]);
    }
  }
  return !connection.unhandled.empty();
}

void Engine::handle(Connection& connection, const ibv_wc& completion) {
  if (completion.status != IBV_WC_SUCCESS) {
    on_work_error(connection, completion);
    return;
  }
  switch (Connection::tag_of(completion.wr_id)) {
    case Connection::Tag::Receive: {
      Notice notice;
      try {
        notice = decode(connection.received(completion.wr_id, completion.byte_len));
      } catch (const Error& error) {
        count_fault(connection, "sent garbage");
        fail_connection(connection,
                        Error(ErrorCode::Protocol,
                              "verbs: " + describe(connection) + " sent garbage: " + error.what()));
        return;
      }
      if (!connection.repost_receive(completion.wr_id)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_recv failed"));
        return;
      }
      if (!connection.on_credits(notice.credits)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
        return;
      }
      on_notice(connection, notice);
      if (!connection.return_credits())
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
      return;
    }
    case Connection::Tag::Control:
    case Connection::Tag::Bind:
      if (!connection.on_send_completion(completion.wr_id))
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
      return;
    case Connection::Tag::Data:
      if (!connection.on_send_completion(completion.wr_id)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
        return;
      }
      active_.on_batch_done(connection, Connection::value_of(completion.wr_id));
      return;
  }
  fail_connection(connection, Error(ErrorCode::Protocol, "verbs: unexpected work completion"));
}

void Engine::on_work_error(Connection& connection, const ibv_wc& completion) {
  static constexpr const char* kRequests[] = {"?", "receive", "notice", "RDMA", "window bind"};
  const auto tag = static_cast<std::size_t>(Connection::tag_of(completion.wr_id));
  const std::string status = std::string(ibv_wc_status_str(completion.status)) + " on a " +
                             kRequests[tag < std::size(kRequests) ? tag : 0];
  const auto broken = Error(ErrorCode::PeerLost, "verbs: connection to " + describe(connection) +
                                                     " broke (" + status + ")");
  // On an accepted connection the device refused the peer's request (the responder then
  // flushes every queued request of ours): it used a key it was not granted. Our own failures
  // (a bind, a peer that stopped answering) are not the peer's fault.
  const bool refused_remote =
      completion.status == IBV_WC_WR_FLUSH_ERR || completion.status == IBV_WC_REM_ACCESS_ERR ||
      completion.status == IBV_WC_REM_INV_REQ_ERR || completion.status == IBV_WC_REM_OP_ERR;
  if (!connection.outgoing && refused_remote) count_fault(connection, status);
  if (Connection::tag_of(completion.wr_id) != Connection::Tag::Data ||
      completion.status == IBV_WC_WR_FLUSH_ERR) {
    fail_connection(connection, broken);
    return;
  }
  // This transfer's own request failed: it gets the precise reason, the others sharing the
  // QP (which is now in the error state) get "connection broke".
  const auto seq = Connection::value_of(completion.wr_id);
  auto found = connection.outbound.find(seq);
  const bool reading = found != connection.outbound.end() &&
                       found->second.stripe->transfer->kind() == OperationKind::Read;
  const std::string what = std::string("verbs: RDMA ") + (reading ? "READ" : "WRITE") + " from " +
                           describe(connection) + " failed: " + status;
  ErrorCode code = ErrorCode::Transport;
  std::string hint;
  if (completion.status == IBV_WC_REM_ACCESS_ERR) {
    code = ErrorCode::AccessDenied;
    hint = " (the owner's registration was revoked or the key is wrong)";
  } else if (completion.status == IBV_WC_RETRY_EXC_ERR ||
             completion.status == IBV_WC_RNR_RETRY_EXC_ERR) {
    code = ErrorCode::PeerLost;
    hint = " (the peer stopped answering)";
  }
  fail_connection(connection, broken, seq, Error(code, what + hint));
}

// ---- timer ----------------------------------------------------------------------------------

void Engine::arm_timer() {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (const auto& [id, connection] : connections_)
    if (connection->state == Connection::State::Resolving ||
        connection->state == Connection::State::Connecting)
      if (!next || connection->deadline < *next) next = connection->deadline;
  if (auto stall = active_.next_stall_check(); stall && (!next || *stall < *next)) next = stall;
  if (auto expiry = next_expiry(); expiry && (!next || *expiry < *next)) next = expiry;
  if (!stalled_binds_.empty() && (!next || stalled_binds_.begin()->first < *next))
    next = stalled_binds_.begin()->first;
  if (next == timer_at_) return;  // armed for then already (a transfer begun, one ended, ...)
  timer_at_ = next;
  itimerspec spec{};
  if (next) {
    // steady_clock is CLOCK_MONOTONIC; an all-zero it_value would disarm instead.
    const auto ns = std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(next->time_since_epoch()).count());
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  ::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Engine::on_timer() {
  std::uint64_t expirations = 0;
  [[maybe_unused]] auto drained = ::read(timer_.get(), &expirations, sizeof expirations);
  timer_at_.reset();  // it went off: no longer armed
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Connection>> late;
  for (const auto& [id, connection] : connections_)
    if ((connection->state == Connection::State::Resolving ||
         connection->state == Connection::State::Connecting) &&
        connection->deadline <= now)
      late.push_back(connection);
  for (const auto& connection : late)
    fail_connection(*connection,
                    Error(ErrorCode::Timeout,
                          "verbs: connecting to " + describe(*connection) + " took more than " +
                              std::to_string(connect_timeout_.count()) + " ms"));
  active_.check_stalls();
  end_expired_grants();
  close_stalled_binds();
  arm_timer();
}

void Engine::close_if_bind_stalls(const std::shared_ptr<Connection>& connection,
                                  const std::shared_ptr<AccessGrant>& grant,
                                  std::chrono::steady_clock::time_point deadline) {
  if (connection->state == Connection::State::Closed || !grant->binding()) return;
  stalled_binds_.emplace(deadline, BindWatch{connection, grant});
  close_stalled_binds();
  arm_timer();
}

void Engine::close_stalled_binds() {
  const auto now = std::chrono::steady_clock::now();
  while (!stalled_binds_.empty() && stalled_binds_.begin()->first <= now) {
    auto watch = stalled_binds_.extract(stalled_binds_.begin()).mapped();
    const auto connection = watch.connection.lock();
    const auto grant = watch.grant.lock();
    if (!connection || !grant || !grant->binding()) continue;
    // Destroying the QP destroys its windows: no key of the ended grant can work after this.
    fail_connection(
        *connection,
        Error(ErrorCode::Timeout,
              "verbs: a window bind on the QP of " + describe(*connection) +
                  " did not complete within " + std::to_string(AccessGrant::kBindWait.count()) +
                  " s of its grant ending (the peer stalls the QP, receiving none of "
                  "our notices?): connection closed so that the grant's keys end"));
  }
}

std::function<void()> Engine::forget_grants_of(const Id128& key) {
  return later([this, key] {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, connection] : connections_)
      if (connection->inbound.erase(key) != 0) connection->grant_ended_at = now;
  });
}

void Engine::watch_expiry(const std::shared_ptr<Registration>& registration,
                          const std::shared_ptr<AccessGrant>& grant) {
  const auto expires = registration->expires_at_ms();
  if (expires == 0) return;
  // Watches of grants that ended are dropped once the map doubled since the last sweep: the
  // map stays about as long as the live grants, and each sweep is paid for by its inserts.
  if (expiries_.size() >= prune_expiries_at_) {
    std::erase_if(expiries_, [](const auto& entry) { return entry.second.grant.expired(); });
    prune_expiries_at_ = std::max<std::size_t>(4096, 2 * expiries_.size());
  }
  expiries_.emplace(expires, ExpiryWatch{registration, grant, {}});
  arm_timer();
}

void Engine::watch_lease(const std::shared_ptr<AccessGrant>& grant,
                         std::function<std::int64_t()> lease_end_ms) {
  const auto ends = lease_end_ms();
  expiries_.emplace(ends, ExpiryWatch{{}, grant, std::move(lease_end_ms)});
  arm_timer();
}

std::optional<std::chrono::steady_clock::time_point> Engine::next_expiry() const {
  if (expiries_.empty()) return std::nullopt;
  const auto in = std::chrono::milliseconds(
      std::max<std::int64_t>(0, expiries_.begin()->first - unix_now_ms() + 1));
  return std::chrono::steady_clock::now() + in;
}

void Engine::end_expired_grants() {
  const auto now = unix_now_ms();
  while (!expiries_.empty() && expiries_.begin()->first < now) {
    auto watch = expiries_.extract(expiries_.begin());
    auto registration = watch.mapped().registration.lock();
    auto grant = watch.mapped().grant.lock();
    if (watch.mapped().lease_end_ms) {  // a request grant's lease: the NIC refuses once it ends
      if (!grant) continue;
      if (const auto ends = watch.mapped().lease_end_ms(); ends >= now) {  // renewed
        expiries_.emplace(ends, std::move(watch.mapped()));
        continue;
      }
      grant->invalidate();
      continue;
    }
    if (!registration || !grant) continue;
    const auto expires = registration->expires_at_ms();
    if (expires != 0 && expires >= now) {  // renewed: watched until its new expiry
      expiries_.emplace(expires, std::move(watch.mapped()));
      continue;
    }
    if (expires != 0) grant->invalidate();
  }
}

void Engine::count_fault(const Connection& connection, std::string_view why) {
  // A grant the owner ended (a cancel, an expiry) under a reader in flight: an honest peer,
  // for as long as a reader needs to hear of it. Not one the peer ended itself (Done, Abort:
  // its entry is gone), or a guesser could begin and abort an operation it holds before every
  // guess to go uncounted; and not for the connection's life, or one cancel would excuse every
  // later guess.
  const auto now = std::chrono::steady_clock::now();
  const auto recent = [&](std::chrono::steady_clock::time_point ended) {
    return ended != std::chrono::steady_clock::time_point{} && now - ended < kEndedGrantExcuses;
  };
  if (recent(connection.grant_ended_at)) return;
  for (const auto& [key, entry] : connection.inbound)
    if (entry.grant->invalidated() && recent(entry.grant->invalidated_at())) return;
  const auto host = connection.address.substr(0, connection.address.rfind(':'));
  const auto faults = faults_.record(host, now);
  if (telemetry_) telemetry_->peer_fault();
  events_log_->write(LogLevel::Warn, "peer_fault",
                     "verbs: connection from " + connection.address + " (calling itself " +
                         (connection.peer.empty() ? std::string("?") : connection.peer) +
                         ") ended in " + std::string(why) + "; " + std::to_string(faults) +
                         " such from " + host + " within the window",
                     LogFields().peer(connection.address).transport("verbs"));
}

// ---- notices ------------------------------------------------------------------------------

}  // namespace memwire::detail::verbs
