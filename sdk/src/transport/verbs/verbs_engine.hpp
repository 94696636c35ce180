#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "active_transfer.hpp"
#include "file_descriptor.hpp"
#include "registration_table.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/local_mr_cache.hpp"
#include "transport/verbs/progress_loop.hpp"
#include "transport/verbs/verbs_connection.hpp"
#include "transport/verbs/verbs_device.hpp"
#include "transport/verbs/verbs_handles.hpp"
#include "transport/verbs/verbs_passive_side.hpp"

namespace memwire::detail::verbs {

// One RDMA device this engine moves bytes over: its listener, its completion channel, the
// cache of local memory regions on it, and what it moved.
struct Rail {
  explicit Rail(std::shared_ptr<const VerbsDevice> rail_device);
  std::shared_ptr<const VerbsDevice> device;
  LocalMrCache local_regions;
  CompChannel completions;
  CmId listener;
  std::string address;  // "ip:port" its listener is bound to
  std::uint64_t chunk_bytes = 0;
  std::uint64_t bytes_moved = 0;  // progress thread only
  std::uint64_t slices_moved = 0;
  std::optional<std::chrono::steady_clock::time_point> failed_at;  // a connection on it last failed
  bool failed_within(std::chrono::steady_clock::duration span,
                     std::chrono::steady_clock::time_point now) const noexcept {
    return failed_at && now - *failed_at < span;
  }
};

// Everything of the verbs transport that lives on its progress thread: one rdma_cm listener
// per rail (RDMA device), the pool of RC connections (one per peer connector, peer address and
// local rail, shared by all operations), the completion channels, and the protocol of notices
// on top of RDMA READ/WRITE. A large transfer is cut into slices spread over every rail pair;
// a rail that fails gives its unfinished slices to the others. The public methods may be
// called from any thread; they hand work to the progress thread.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static std::shared_ptr<Engine> create(const TransportContext& context);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops the progress thread and fails whatever is still in flight. Idempotent.
  void shutdown();

  std::size_t rail_count() const noexcept { return rails_.size(); }
  const std::shared_ptr<const VerbsDevice>& device(std::size_t rail) const noexcept {
    return rails_[rail]->device;
  }
  const std::string& address(std::size_t rail) const noexcept { return rails_[rail]->address; }

  // Begins moving the bytes of `transfer` to or from the owner behind `offer`.
  void start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer);

  // What the active and passive sides use, on the progress thread only.
  const std::map<rdma_cm_id*, std::shared_ptr<Connection>>& connections() const noexcept {
    return connections_;
  }
  // Sends `notice` on `connection`; a post that fails fails the connection.
  void send(Connection& connection, const Notice& notice);
  // Closes `connection` and fails everything that used it. `culprit` (a transfer whose own
  // work request failed) gets `culprit_error`; every other one gets `error`.
  void fail_connection(Connection& connection, const Error& error,
                       std::optional<std::uint64_t> culprit = std::nullopt,
                       std::optional<Error> culprit_error = std::nullopt);
  void log(const std::string& line) const {
    if (log_) log_(line);
  }

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
  std::shared_ptr<Connection> connection_to(const std::string& peer, const std::string& address,
                                            std::size_t rail);
  void on_established(Connection& connection, const std::optional<std::string>& peer);

  // completions
  void on_completions(Rail& rail);
  void on_async_events(std::size_t rail);
  void drain(Connection& connection);
  void handle(Connection& connection, const ibv_wc& completion);
  void on_work_error(Connection& connection, const ibv_wc& completion);

  // timer: connections that take too long to establish
  void on_timer();
  void arm_timer();

  // active side
  void begin(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer,
             std::uint64_t seq);
  Notice begin_notice(const OutboundTransfer& leg) const;
  // Opens a leg of `stripe` on its pair `pair`; false when no connection could be started.
  bool open_leg(const std::shared_ptr<Stripe>& stripe, std::size_t pair);
  // After a leg failed: the legs left take its slices, or a new pair is tried, or, with no
  // rail left, the transfer fails.
  void resume(const std::shared_ptr<Stripe>& stripe);
  // Queues and pumps every accepted leg of `stripe`.
  void wake_legs(const Stripe& stripe);
  // Every slice moved: Done on `connection`.
  void finish_stripe(Connection& connection, std::uint64_t leg_seq, Stripe& stripe);
  // Lets go of the buffers once no leg has requests in flight; forgets an aborted stripe
  // without legs.
  void settle(const std::shared_ptr<Stripe>& stripe);
  OutboundTransfer* leg_of(std::uint64_t leg_seq);
  // With several rails: legs that stopped moving while others move fail their connection.
  void check_stalls();
  std::optional<std::chrono::steady_clock::time_point> next_stall_check();
  void on_accept(Connection& connection, const Notice& notice);
  void on_batch_done(Connection& connection, std::uint64_t seq);
  void on_result(Connection& connection, const Notice& notice);
  void pump(Connection& connection);
  void abort(std::uint64_t seq, const Error& error);
  void break_transfer(std::uint64_t seq);

  // A notice from the peer: to the side it concerns.
  void on_notice(Connection& connection, const Notice& notice);

  const std::string connector_name_;
  const std::function<void(std::string_view)> log_;
  const std::shared_ptr<TelemetryRecorder> telemetry_;  // counts connections; null when off
  const std::chrono::milliseconds connect_timeout_;
  const std::size_t max_connections_;  // accepted ones, and per peer host below
  const std::size_t max_connections_per_peer_;
  const std::uint64_t slice_bytes_;
  EventChannel events_;
  FileDescriptor timer_;
  std::vector<std::unique_ptr<Rail>> rails_;  // after events_: their listeners go first
  std::atomic<std::uint64_t> next_seq_{1};

  // Progress thread only.
  std::map<rdma_cm_id*, std::shared_ptr<Connection>> connections_;
  std::map<std::string, std::shared_ptr<Connection>> pool_;   // outgoing, "peer@address"
  std::map<std::uint64_t, Connection*> transfers_;            // leg seq -> its connection
  std::map<std::uint64_t, std::shared_ptr<Stripe>> stripes_;  // transfer seq -> its stripe
  std::vector<std::shared_ptr<Stripe>> orphaned_;  // lost a leg: resumed after the handler
  std::chrono::steady_clock::time_point stall_check_at_{};
  std::vector<std::shared_ptr<Connection>> graveyard_;
  std::promise<void>* flushed_ = nullptr;  // set while shutdown() waits for notices to leave
  VerbsPassiveSide passive_;

  ProgressLoop loop_;  // last: stopped and joined before anything above goes
};

}  // namespace memwire::detail::verbs
