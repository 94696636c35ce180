#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/active_transfer.hpp"
#include "core/operation_core.hpp"
#include "telemetry/event_log.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/local_mr_cache.hpp"
#include "transport/verbs/progress_loop.hpp"
#include "transport/verbs/rail.hpp"
#include "transport/verbs/verbs_active_side.hpp"
#include "transport/verbs/verbs_connection.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"
#include "transport/verbs/verbs_passive_side.hpp"
#include "transport/verbs/verbs_port.hpp"
#include "util/file_descriptor.hpp"
#include "util/source_faults.hpp"

namespace memwire::detail::verbs {

// Everything of the verbs transport that lives on its progress thread: one rdma_cm listener
// per rail (RDMA device), the pool of RC connections (one per peer connector, peer address and
// local rail, shared by all operations), the completion channels and the timer. The protocol
// of notices on top of RDMA READ/WRITE is the two sides': the engine hands each notice and
// each completed batch to the side it concerns (VerbsActiveSide, VerbsPassiveSide), and a
// failed connection's transfers to both. start(), shutdown() and the rails' accessors may be
// called from any thread; they hand work to the progress thread, or do it themselves when they
// can take the loop's work (ProgressLoop::try_take_work). A thread waiting for a transfer
// reads the completions itself for a while (drive).
class Engine final : public std::enable_shared_from_this<Engine>,
                     public VerbsPort,
                     public WaitDriver {
 public:
  static std::shared_ptr<Engine> create(const TransportContext& context);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops the progress thread and fails whatever is still in flight. Idempotent.
  void shutdown();

  std::size_t rail_count() const noexcept override { return rails_.size(); }
  const std::shared_ptr<const VerbsDevice>& device(std::size_t rail) const noexcept {
    return rails_[rail]->device;
  }
  const std::string& address(std::size_t rail) const noexcept { return rails_[rail]->address; }
  // Whether peers of `rail` get memory windows over regions registered at offer time (else
  // each accepted connection has its own protection domain, and grants register there).
  bool grants_windows(std::size_t rail) const noexcept { return !rails_[rail]->own_pd_per_peer; }

  // Begins moving the bytes of `transfer` to or from the owner behind `offer`: on the calling
  // thread when no other thread runs the engine now (its first request leaves at once), else
  // on the progress thread.
  void start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer);

  // The waiter's side (see WaitDriver): a thread waiting for a transfer runs the engine in the
  // progress thread's place, reading every completion queue and handling what it finds as the
  // progress thread would (other transfers' completions too), until `settled` or `until`.
  // `bytes`: what the transfer moves. A small one's queues are polled for about as long as
  // small transfers take here (a poll reads memory the device writes: no system call, no
  // wake-up); then, and for a large one at once, it sleeps on the completion channels, which
  // the progress thread stops watching meanwhile. False at once when another thread runs the
  // engine now.
  bool drive(std::uint64_t bytes, const std::atomic<bool>& settled,
             std::chrono::steady_clock::time_point spin_until,
             std::chrono::steady_clock::time_point until) override;

  // The port of the active and passive sides (VerbsPort), under the loop's work only.
  Rail& rail(std::size_t index) const noexcept override { return *rails_[index]; }
  const std::map<rdma_cm_id*, std::shared_ptr<Connection>>& connections() const noexcept override {
    return connections_;
  }
  std::shared_ptr<Connection> connect(const std::string& peer, const std::string& address,
                                      std::size_t rail) override;
  void send(Connection& connection, const Notice& notice) override;
  void fail_connection(Connection& connection, const Error& error,
                       std::optional<std::uint64_t> culprit = std::nullopt,
                       std::optional<Error> culprit_error = std::nullopt) override;
  std::function<void()> later(std::function<void()> work) override;
  void watch_lease(const std::shared_ptr<AccessGrant>& grant,
                   std::function<std::int64_t()> lease_end_ms) override;
  void watch_expiry(const std::shared_ptr<Registration>& registration,
                    const std::shared_ptr<AccessGrant>& grant) override;
  void close_if_bind_stalls(const std::shared_ptr<Connection>& connection,
                            const std::shared_ptr<AccessGrant>& grant,
                            std::chrono::steady_clock::time_point deadline) override;
  const std::shared_ptr<KeyBudget>& key_budget() const noexcept override { return keys_; }

  // A callable for any thread: once the operation `key` is revoked, every connection forgets
  // its grant of it (their entries would otherwise stay until Done, Abort or disconnect).
  std::function<void()> forget_grants_of(const Id128& key);

 private:
  explicit Engine(const TransportContext& context);
  void listen(Rail& rail);

  // Runs `work` on the progress thread, then frees connections that died meanwhile.
  bool run_on_loop(std::function<void()> work);
  void bury() { graveyard_.clear(); }
  // After every handler: frees dead connections; tells a closing connector once every queued
  // notice has left.
  void after_handler();

  // rdma_cm
  void on_cm_events();
  void on_connect_request(rdma_cm_id* id, const std::optional<std::string>& peer,
                          const rdma_conn_param& requested);
  void on_established(Connection& connection, const std::optional<std::string>& peer);

  // completions
  // `beginning`: see drain(). Handles a bounded number of the rail's completion events (the
  // channel stays readable for the rest). True when completions were left for later.
  bool on_completions(Rail& rail, std::optional<std::uint64_t> beginning = std::nullopt);
  void on_async_events(std::size_t rail);
  // Handles the connection's completions: first those left for later, then its queue's. With
  // `beginning` (a caller that began that transfer): only that transfer's batches and the
  // send completions, which run no callback; what comes from then on is left for later (a
  // notice, another transfer's batch: no other transfer's callback runs inside begin_read, whose
  // caller may hold a lock it takes). At most kMostCompletionsPerDrain from the queue: a peer
  // that keeps it full holds the loop no longer than that. True when completions were left:
  // the connection is then drained again later (come_back_later).
  bool drain(Connection& connection, std::optional<std::uint64_t> beginning = std::nullopt);
  // drain() up to its bound, without queueing what is left for later.
  bool drain_some(Connection& connection, std::optional<std::uint64_t> beginning);
  // Drains every connection's queue, without waiting for its completion events (a waiter's).
  void poll_every_queue();
  // `connection` has completions left (drain's bound, or a beginning caller's): the loop
  // drains it again after what is ready now (rdma_cm events, timers, commands) had its turn,
  // and again while some are left. One command queued at a time, for every such connection.
  void come_back_later(Connection& connection);
  void drain_left_over();
  // The loop's work, taken by another thread than the progress thread (a caller beginning a
  // transfer, a waiter): the completion channels are its own meanwhile, so that completions of
  // its own posts (rxe handles a post within the call) do not wake the progress thread only to
  // wait for the work. It handles the events left on them before it lets go: a waiter all of
  // them, a caller that began transfer `beginning` those drain() allows it, the rest being
  // handed to the progress thread.
  class BorrowedWork {
   public:
    BorrowedWork(Engine& engine, std::optional<std::uint64_t> beginning);
    ~BorrowedWork();
    BorrowedWork(const BorrowedWork&) = delete;
    BorrowedWork& operator=(const BorrowedWork&) = delete;
    explicit operator bool() const noexcept { return static_cast<bool>(work_); }

   private:
    Engine& engine_;
    const std::optional<std::uint64_t> beginning_;
    ProgressLoop::Work work_;
  };
  void watch_completions(bool watched);
  void handle(Connection& connection, const ibv_wc& completion);
  void on_work_error(Connection& connection, const ibv_wc& completion);

  // timer: connections that take too long to establish
  void on_timer();
  void arm_timer();

  // An accepted connection ended in an access error, a flush or garbage: a fault of its
  // source, unless the owner had ended a grant it used (then the error is the owner's doing).
  void count_fault(const Connection& connection, std::string_view why);
  // Grants of expired registrations end.
  void end_expired_grants();
  // Connections whose ended grants' binds are still in flight past their deadline close.
  void close_stalled_binds();
  std::optional<std::chrono::steady_clock::time_point> next_expiry() const;

  // A notice from the peer: to the side it concerns.
  void on_notice(Connection& connection, const Notice& notice);
  void log(const std::string& line) const {
    if (log_) log_(line);
  }

  const std::string connector_name_;
  const std::function<void(std::string_view)> log_;
  const std::shared_ptr<const EventLog> events_log_;
  const std::shared_ptr<TelemetryRecorder> telemetry_;  // counts connections; null when off
  const std::chrono::milliseconds connect_timeout_;
  const std::size_t max_connections_;  // accepted ones, and per peer host below
  const std::size_t max_connections_per_peer_;
  EventChannel events_;
  FileDescriptor timer_;
  std::optional<std::chrono::steady_clock::time_point> timer_at_;  // when it goes off, if armed
  std::vector<std::unique_ptr<Rail>> rails_;  // after events_: their listeners go first

  // Under the loop's work only: the progress thread, or a thread that took it.
  std::map<rdma_cm_id*, std::shared_ptr<Connection>> connections_;
  std::map<std::string, std::shared_ptr<Connection>> pool_;  // outgoing, "peer@address"
  std::vector<std::shared_ptr<Connection>> graveyard_;
  SourceFaults faults_;
  struct ExpiryWatch {
    std::weak_ptr<Registration> registration;
    std::weak_ptr<AccessGrant> grant;
    // A request grant's lease: ends when this says (unix ms), whatever the registration says.
    std::function<std::int64_t()> lease_end_ms;
  };
  std::multimap<std::int64_t, ExpiryWatch> expiries_;  // by unix ms
  struct BindWatch {
    std::weak_ptr<Connection> connection;
    std::weak_ptr<AccessGrant> grant;
  };
  std::multimap<std::chrono::steady_clock::time_point, BindWatch> stalled_binds_;
  const std::shared_ptr<KeyBudget> keys_;
  std::size_t prune_expiries_at_ = 4096;
  std::promise<void>* flushed_ = nullptr;  // set while shutdown() waits for notices to leave
  std::vector<std::shared_ptr<Connection>> polled_;  // poll_every_queue()'s, kept for its capacity
  // Connections come_back_later() drains again (a command is queued while this is not empty),
  // and the ones it is draining now. Ids: a connection gone meanwhile is not found.
  std::vector<rdma_cm_id*> left_over_, draining_;
  // How long waits for small transfers last here (a moving average): how long a waiter polls.
  std::chrono::nanoseconds typical_small_wait_{100'000};
  VerbsActiveSide active_;
  VerbsPassiveSide passive_;

  ProgressLoop loop_;  // last: stopped and joined before anything above goes
};

}  // namespace memwire::detail::verbs
