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

namespace memwire::detail::verbs {

// Everything of the verbs transport that lives on its progress thread: the rdma_cm listener,
// the pool of RC connections (one per peer connector and address, shared by all operations),
// the completion channel, and the protocol of notices on top of RDMA READ/WRITE. The public
// methods may be called from any thread; they hand work to the progress thread.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static std::shared_ptr<Engine> create(const TransportContext& context);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops the progress thread and fails whatever is still in flight. Idempotent.
  void shutdown();

  const std::shared_ptr<const VerbsDevice>& device() const noexcept { return device_; }
  const std::string& address() const noexcept { return address_; }  // "ip:port" we listen on
  LocalMrCache& local_regions() noexcept { return local_regions_; }

  // Begins moving the bytes of `transfer` to or from the owner behind `offer`.
  void start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer);

 private:
  explicit Engine(const TransportContext& context);
  void listen();

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
  std::shared_ptr<Connection> connection_to(const std::string& peer, const std::string& address);
  void on_established(Connection& connection, const std::optional<std::string>& peer);

  // completions
  void on_completions();
  void drain(Connection& connection);
  void handle(Connection& connection, const ibv_wc& completion);
  void on_work_error(Connection& connection, const ibv_wc& completion);

  // timer: connections that take too long to establish
  void on_timer();
  void arm_timer();

  // active side
  void begin(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer,
             std::uint64_t seq);
  Notice begin_notice(const OutboundTransfer& outbound) const;
  void on_accept(Connection& connection, const Notice& notice);
  void on_batch_done(Connection& connection, std::uint64_t seq);
  void on_result(Connection& connection, const Notice& notice);
  void pump(Connection& connection);
  void abort(std::uint64_t seq, const Error& error);
  void break_transfer(std::uint64_t seq);

  // passive side
  void on_notice(Connection& connection, const Notice& notice);
  void on_begin(Connection& connection, const Notice& notice);
  void on_done(Connection& connection, const Notice& notice);
  void on_abort(Connection& connection, const Notice& notice);
  void reply(Connection& connection, NoticeType type, std::uint64_t seq,
             std::optional<ErrorCode> error = std::nullopt, std::string text = {});

  // Closes `connection` and fails everything that used it. `culprit` (a transfer whose own
  // work request failed) gets `culprit_error`; every other one gets `error`.
  void fail_connection(Connection& connection, const Error& error,
                       std::optional<std::uint64_t> culprit = std::nullopt,
                       std::optional<Error> culprit_error = std::nullopt);
  std::string describe(const Connection& connection) const;

  void log(const std::string& line) const {
    if (log_) log_(line);
  }

  const std::string connector_name_;
  const std::function<void(std::string_view)> log_;
  const std::chrono::milliseconds connect_timeout_;
  const std::size_t max_connections_;  // accepted ones, and per peer host below
  const std::size_t max_connections_per_peer_;
  const std::shared_ptr<RegistrationTable> registrations_;
  const std::shared_ptr<const VerbsDevice> device_;
  std::uint64_t chunk_bytes_;
  LocalMrCache local_regions_;
  EventChannel events_;
  CompChannel completions_;
  FileDescriptor timer_;
  CmId listener_;
  std::string address_;
  std::atomic<std::uint64_t> next_seq_{1};

  // Progress thread only.
  std::map<rdma_cm_id*, std::shared_ptr<Connection>> connections_;
  std::map<std::string, std::shared_ptr<Connection>> pool_;  // outgoing, "peer@address"
  std::map<std::uint64_t, Connection*> transfers_;           // seq -> its connection
  std::vector<std::shared_ptr<Connection>> graveyard_;
  std::promise<void>* flushed_ = nullptr;  // set while shutdown() waits for notices to leave

  ProgressLoop loop_;  // last: stopped and joined before anything above goes
};

}  // namespace memwire::detail::verbs
