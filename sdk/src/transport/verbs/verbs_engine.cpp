#include "transport/verbs/verbs_engine.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "registration.hpp"
#include "transport/verbs/ipv4_endpoint.hpp"

namespace memwire::detail::verbs {
namespace {

// Work requests are cut at the port's max message size, and at 1 MiB: many requests in flight
// keep the device busy, and a cancelled transfer drains quickly.
constexpr std::uint64_t kMaxChunk = std::uint64_t{1} << 20;
constexpr int kBacklog = 128;
// How long a closing connector waits for queued notices to leave.
constexpr std::chrono::milliseconds kFlushOnClose{500};
// RC retries (transport and receiver-not-ready); 7 = retry RNR forever, a slow peer is no error.
constexpr std::uint8_t kRetries = 7;

[[noreturn]] void throw_errno(ErrorCode code, const std::string& what) {
  throw Error(code, what + ": " + std::strerror(errno));
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    throw_errno(ErrorCode::Transport, "fcntl");
}

int timeout_ms(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 1, 3'600'000));
}

sockaddr_in ipv4_address(const std::string& ip, std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1)
    throw Error(ErrorCode::Transport, "bad IPv4 address " + ip);
  return address;
}

rdma_conn_param connection_parameters(const std::vector<std::byte>& hello) {
  rdma_conn_param parameters{};
  parameters.private_data = hello.data();
  parameters.private_data_len = static_cast<std::uint8_t>(hello.size());
  // As many outstanding RDMA READs as both devices allow.
  parameters.initiator_depth = RDMA_MAX_INIT_DEPTH;
  parameters.responder_resources = RDMA_MAX_RESP_RES;
  parameters.retry_count = kRetries;
  parameters.rnr_retry_count = kRetries;
  return parameters;
}

}  // namespace

std::shared_ptr<Engine> Engine::create(const TransportContext& context) {
  std::shared_ptr<Engine> engine(new Engine(context));
  engine->loop_.start();
  return engine;
}

Engine::Engine(const TransportContext& context)
    : connector_name_(context.connector_name),
      log_(context.options.log),
      connect_timeout_(context.options.connect_timeout),
      max_connections_(context.options.max_connections),
      max_connections_per_peer_(context.options.max_connections_per_peer),
      registrations_(context.registrations),
      device_(std::make_shared<const VerbsDevice>(context.options.rdma_device,
                                                  context.options.gid_index)),
      chunk_bytes_(std::min<std::uint64_t>(kMaxChunk, device_->max_message_size())),
      local_regions_(device_),
      events_(rdma_create_event_channel()),
      completions_(ibv_create_comp_channel(device_->context())),
      timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  if (!events_) throw_errno(ErrorCode::Transport, "rdma_create_event_channel");
  if (!completions_) throw_errno(ErrorCode::Transport, "ibv_create_comp_channel");
  if (!timer_) throw_errno(ErrorCode::Transport, "timerfd_create");
  if (chunk_bytes_ == 0) chunk_bytes_ = kMaxChunk;
  set_nonblocking(events_->fd);
  set_nonblocking(completions_->fd);
  listen();
  log("verbs: " + device_->name() + " port " + std::to_string(device_->port()) + ", GID index " +
      std::to_string(device_->gid_index()) + ", listening on " + address_);
  loop_.watch(events_->fd, [this] {
    on_cm_events();
    after_handler();
  });
  loop_.watch(completions_->fd, [this] {
    on_completions();
    after_handler();
  });
  loop_.watch(timer_.get(), [this] {
    on_timer();
    after_handler();
  });
}

Engine::~Engine() { shutdown(); }

void Engine::listen() {
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(events_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
    throw_errno(ErrorCode::Transport, "rdma_create_id");
  listener_.reset(raw);
  auto address = ipv4_address(device_->ipv4(), 0);
  if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&address)) != 0)
    throw_errno(ErrorCode::Transport, "rdma_bind_addr " + device_->ipv4());
  if (raw->verbs != device_->context())
    throw Error(ErrorCode::Transport,
                device_->ipv4() + " does not belong to RDMA device " + device_->name());
  if (rdma_listen(raw, kBacklog) != 0) throw_errno(ErrorCode::Transport, "rdma_listen");
  address_ = device_->ipv4() + ":" + std::to_string(ntohs(rdma_get_src_port(raw)));
}

void Engine::shutdown() {
  // Notices already queued (a Result whose owner was just woken) still go out, briefly.
  if (!loop_.on_loop_thread()) {
    std::promise<void> flushed;
    auto done = flushed.get_future();
    if (run_on_loop([this, &flushed] {
          flushed_ = &flushed;
          after_handler();
        }))
      done.wait_for(kFlushOnClose);
  }
  loop_.stop();
  flushed_ = nullptr;
  // The progress thread is gone: what it owned is ours now.
  std::vector<std::shared_ptr<Connection>> all;
  for (const auto& [id, connection] : connections_) all.push_back(connection);
  for (const auto& connection : all)
    fail_connection(*connection, Error(ErrorCode::Cancelled, "the connector is shutting down"));
  bury();
  listener_.reset();
}

void Engine::after_handler() {
  bury();
  if (flushed_ == nullptr) return;
  for (const auto& [id, connection] : connections_)
    if (connection->state == Connection::State::Established && connection->notices_pending())
      return;
  flushed_->set_value();
  flushed_ = nullptr;
}

bool Engine::run_on_loop(std::function<void()> work) {
  return loop_.post([this, work = std::move(work)] {
    work();
    after_handler();
  });
}

void Engine::start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer) {
  const auto seq = next_seq_++;
  // The failure notifier may run on any thread (a cancel, a drop); the abort runs on ours.
  transfer->set_failure_notifier([weak = weak_from_this(), seq](const Error& error) {
    if (auto engine = weak.lock())
      engine->run_on_loop([raw = engine.get(), seq, error] { raw->abort(seq, error); });
  });
  if (!run_on_loop([this, transfer, offer, seq] { begin(transfer, offer, seq); }))
    transfer->fail(Error(ErrorCode::Cancelled, "the verbs transport is shutting down"));
}

// ---- rdma_cm ------------------------------------------------------------------------------

void Engine::on_cm_events() {
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(events_.get(), &event) != 0) return;  // drained (EAGAIN)
    // Copy what we need and acknowledge at once: destroying an id waits for its events to be
    // acknowledged, and private data lives only until then.
    const auto type = event->event;
    rdma_cm_id* id = event->id;
    const int status = event->status;
    const rdma_conn_param parameters = event->param.conn;
    std::optional<std::string> hello;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_ESTABLISHED)
      hello = decode_hello(parameters.private_data, parameters.private_data_len);
    rdma_ack_cm_event(event);

    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      on_connect_request(id, hello, parameters);
      continue;
    }
    auto found = connections_.find(id);
    if (found == connections_.end()) continue;  // the listener, or a connection we closed
    const auto keep = found->second;
    Connection& connection = *keep;
    if (connection.state == Connection::State::Closed) continue;
    const auto why = std::string(rdma_event_str(type)) + " (status " + std::to_string(status) + ")";
    try {
      switch (type) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
          connection.create_queue_pair();
          if (rdma_resolve_route(id, timeout_ms(connect_timeout_)) != 0)
            throw_errno(ErrorCode::PeerLost, "rdma_resolve_route to " + connection.address);
          break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
          const auto ours = encode_hello(connector_name_, kConnectPrivateData);
          auto parameters_out = connection_parameters(ours);
          if (rdma_connect(id, &parameters_out) != 0)
            throw_errno(ErrorCode::PeerLost, "rdma_connect to " + connection.address);
          connection.state = Connection::State::Connecting;
          break;
        }
        case RDMA_CM_EVENT_ESTABLISHED:
          on_established(connection, hello);
          break;
        case RDMA_CM_EVENT_REJECTED:
          fail_connection(connection,
                          Error(ErrorCode::PeerLost, "verbs: " + describe(connection) +
                                                         " refused the connection (no memwire "
                                                         "listener there any more?)"));
          break;
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
          fail_connection(connection,
                          Error(ErrorCode::PeerLost,
                                "verbs: cannot reach " + describe(connection) + ": " + why));
          break;
        case RDMA_CM_EVENT_DISCONNECTED:
          // What arrived before the peer left (its last answers) is still in our CQ: the two
          // event channels are read in no particular order.
          drain(connection);
          fail_connection(connection,
                          Error(ErrorCode::PeerLost, "verbs: " + describe(connection) +
                                                         " disconnected (process gone?)"));
          break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
          fail_connection(connection,
                          Error(ErrorCode::Transport,
                                "verbs: RDMA device " + device_->name() + " was removed"));
          break;
        default:
          break;  // TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do
      }
    } catch (const Error& error) {
      fail_connection(connection, error);
    }
  }
}

void Engine::on_connect_request(rdma_cm_id* id, const std::optional<std::string>& peer,
                                const rdma_conn_param&) {
  CmId owned(id);  // destroyed (so refused) unless accepted below
  if (!peer) {
    rdma_reject(id, nullptr, 0);
    return;
  }
  // Each accepted connection costs a queue pair and its buffers: capped in total and per host.
  const auto endpoint = format_endpoint(rdma_get_peer_addr(id));
  const auto host = endpoint.substr(0, endpoint.rfind(':'));
  std::size_t incoming = 0, from_host = 0;
  for (const auto& [other_id, other] : connections_) {
    if (other->outgoing || other->state == Connection::State::Closed) continue;
    ++incoming;
    if (other->address.substr(0, other->address.rfind(':')) == host) ++from_host;
  }
  if (incoming >= max_connections_ || from_host >= max_connections_per_peer_) {
    log("verbs: connection from " + endpoint + " refused: over the connection limit");
    rdma_reject(id, nullptr, 0);
    return;
  }
  auto connection = std::make_shared<Connection>(device_, completions_.get(), std::move(owned),
                                                 false, *peer, endpoint);
  try {
    connection->create_queue_pair();
    const auto ours = encode_hello(connector_name_, kAcceptPrivateData);
    auto parameters = connection_parameters(ours);
    if (rdma_accept(id, &parameters) != 0) throw_errno(ErrorCode::Transport, "rdma_accept");
  } catch (const Error&) {
    rdma_reject(id, nullptr, 0);
    return;  // the connection's destructor destroys its QP and the id
  }
  connection->state = Connection::State::Connecting;
  connection->deadline = std::chrono::steady_clock::now() + connect_timeout_;
  connections_[id] = std::move(connection);
  arm_timer();
}

std::shared_ptr<Connection> Engine::connection_to(const std::string& peer,
                                                  const std::string& address) {
  const auto key = peer + "@" + address;
  if (auto found = pool_.find(key);
      found != pool_.end() && found->second->state != Connection::State::Closed)
    return found->second;

  auto destination = parse_ipv4_endpoint(address);
  if (!destination)
    throw Error(ErrorCode::InvalidMetadata, "verbs offer address '" + address + "' is not ip:port");
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(events_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
    throw_errno(ErrorCode::Transport, "rdma_create_id");
  CmId id(raw);
  // From our device's address, so that the route goes through our device.
  auto source = ipv4_address(device_->ipv4(), 0);
  if (rdma_resolve_addr(raw, reinterpret_cast<sockaddr*>(&source),
                        reinterpret_cast<sockaddr*>(&*destination),
                        timeout_ms(connect_timeout_)) != 0)
    throw_errno(ErrorCode::PeerLost, "verbs: cannot resolve " + address);
  auto connection =
      std::make_shared<Connection>(device_, completions_.get(), std::move(id), true, peer, address);
  connection->deadline = std::chrono::steady_clock::now() + connect_timeout_;
  connections_[raw] = connection;
  pool_[key] = connection;
  arm_timer();
  return connection;
}

void Engine::on_established(Connection& connection, const std::optional<std::string>& peer) {
  if (connection.outgoing) {
    // The listener at that address must be the connector the metadata names: an address
    // reused by another process must never see our keys or our bytes.
    const auto expected = connection.peer.substr(0, kAcceptPrivateData - 6);
    if (!peer || *peer != expected) {
      fail_connection(connection, Error(ErrorCode::PeerLost,
                                        "verbs: " + connection.address + " is served by " +
                                            (peer ? "connector " + *peer : "something else") +
                                            ", not by connector " + connection.peer));
      return;
    }
  }
  connection.deadline = {};
  bool posted = connection.establish();
  for (auto& [seq, outbound] : connection.outbound)
    if (posted && !outbound.begun) posted = connection.send(begin_notice(outbound));
  for (auto& [seq, outbound] : connection.outbound) outbound.begun = true;
  arm_timer();
  if (!posted)
    fail_connection(connection, Error(ErrorCode::Transport,
                                      "verbs: cannot post to the QP of " + describe(connection)));
}

// ---- completions ----------------------------------------------------------------------------

void Engine::on_completions() {
  for (;;) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(completions_.get(), &cq, &context) != 0) return;  // drained
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
    drain(connection);
  }
}

void Engine::drain(Connection& connection) {
  if (connection.cq() == nullptr) return;
  ibv_wc completions[32];
  while (connection.state != Connection::State::Closed) {
    const int count = ibv_poll_cq(connection.cq(), 32, completions);
    if (count < 0) {
      fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_poll_cq failed"));
      return;
    }
    if (count == 0) return;
    for (int i = 0; i < count && connection.state != Connection::State::Closed; ++i)
      handle(connection, completions[i]);
  }
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
        fail_connection(connection,
                        Error(ErrorCode::Protocol,
                              "verbs: " + describe(connection) + " sent garbage: " + error.what()));
        return;
      }
      if (!connection.repost_receive(completion.wr_id)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_recv failed"));
        return;
      }
      on_notice(connection, notice);
      return;
    }
    case Connection::Tag::Control:
      if (!connection.on_send_completion(completion.wr_id))
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
      return;
    case Connection::Tag::Data:
      if (!connection.on_send_completion(completion.wr_id)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: ibv_post_send failed"));
        return;
      }
      on_batch_done(connection, Connection::value_of(completion.wr_id));
      return;
  }
  fail_connection(connection, Error(ErrorCode::Protocol, "verbs: unexpected work completion"));
}

void Engine::on_work_error(Connection& connection, const ibv_wc& completion) {
  const std::string status = ibv_wc_status_str(completion.status);
  const auto broken = Error(ErrorCode::PeerLost, "verbs: connection to " + describe(connection) +
                                                     " broke (" + status + ")");
  if (Connection::tag_of(completion.wr_id) != Connection::Tag::Data ||
      completion.status == IBV_WC_WR_FLUSH_ERR) {
    fail_connection(connection, broken);
    return;
  }
  // This transfer's own request failed: it gets the precise reason, the others sharing the
  // QP (which is now in the error state) get "connection broke".
  const auto seq = Connection::value_of(completion.wr_id);
  auto found = connection.outbound.find(seq);
  const bool reading =
      found != connection.outbound.end() && found->second.transfer->kind() == OperationKind::Read;
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
  arm_timer();
}

// ---- notices ------------------------------------------------------------------------------

void Engine::on_notice(Connection& connection, const Notice& notice) {
  switch (notice.type) {
    case NoticeType::Begin:
      on_begin(connection, notice);
      return;
    case NoticeType::Accept:
      on_accept(connection, notice);
      return;
    case NoticeType::Done:
      on_done(connection, notice);
      return;
    case NoticeType::Result:
      on_result(connection, notice);
      return;
    case NoticeType::Abort:
      on_abort(connection, notice);
      return;
  }
}

// ---- failure --------------------------------------------------------------------------------

void Engine::fail_connection(Connection& connection, const Error& error,
                             std::optional<std::uint64_t> culprit,
                             std::optional<Error> culprit_error) {
  if (connection.state == Connection::State::Closed) return;
  if (error.code() != ErrorCode::Cancelled) log(error.what());
  // First the QP goes: from then on the device touches none of the buffers, so the pins and
  // the regions may be released before the transfers learn about it.
  connection.close();
  auto outbound = std::move(connection.outbound);
  auto inbound = std::move(connection.inbound);
  connection.outbound.clear();
  connection.inbound.clear();
  connection.ready.clear();
  for (auto& [seq, transfer] : outbound) {
    transfers_.erase(seq);
    transfer.release_buffers();
  }
  // Freed once the current handler returns: the caller may still hold a reference.
  if (auto found = connections_.find(connection.id()); found != connections_.end()) {
    graveyard_.push_back(found->second);
    connections_.erase(found);
  }
  std::erase_if(pool_, [&](const auto& entry) { return entry.second.get() == &connection; });
  arm_timer();

  for (auto& [seq, transfer] : outbound)
    if (!transfer.aborted)
      transfer.transfer->fail(culprit && *culprit == seq && culprit_error ? *culprit_error : error);
  for (auto& [key, weak] : inbound)
    if (auto registration = weak.lock())
      registration->fail(Error(ErrorCode::PeerLost, error.what()));
}

std::string Engine::describe(const Connection& connection) const {
  return "peer " + (connection.peer.empty() ? std::string("?") : connection.peer) + " at " +
         connection.address;
}

}  // namespace memwire::detail::verbs
