#include "transport/verbs/verbs_engine.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "core/registration.hpp"
#include "memwire/clock.hpp"
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
// With more than one rail, a rail that stops answering must be given up on in seconds (its
// slices move to the others): the local ACK timeout is 4.096 us * 2^16 = 268 ms, so about
// 2 s with the retries. A single rail keeps rdma_cm's default.
constexpr std::uint8_t kMultiRailAckTimeout = 16;

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

// The rails a connector runs on: the devices listed, or every device with an active port.
std::vector<std::shared_ptr<const VerbsDevice>> open_rails(
    const ConnectorOptions& options, const std::function<void(std::string_view)>& log,
    const std::shared_ptr<TelemetryRecorder>& telemetry) {
  auto wanted = options.rdma.devices;
  if (wanted.empty() && !options.rdma.device.empty()) wanted.push_back(options.rdma.device);
  if (wanted.size() > kMaxRails)
    throw Error(ErrorCode::InvalidArgument, "at most " + std::to_string(kMaxRails) +
                                                " RDMA devices, got " +
                                                std::to_string(wanted.size()));
  std::vector<std::shared_ptr<const VerbsDevice>> rails;
  for (const auto& name : wanted) {
    if (name.empty()) throw Error(ErrorCode::InvalidArgument, "an RDMA device name is empty");
    if (std::count(wanted.begin(), wanted.end(), name) > 1)
      throw Error(ErrorCode::InvalidArgument, "RDMA device " + name + " is listed twice");
    rails.push_back(std::make_shared<const VerbsDevice>(name, options.rdma.gid_index, telemetry));
  }
  if (!wanted.empty()) return rails;
  for (const auto& name : VerbsDevice::device_names()) {
    if (rails.size() == kMaxRails) break;
    try {
      rails.push_back(std::make_shared<const VerbsDevice>(name, options.rdma.gid_index, telemetry));
    } catch (const Error& error) {
      if (log) log("verbs: " + name + " left out: " + error.what());
    }
  }
  // None usable: the single-device search says why.
  if (rails.empty())
    rails.push_back(std::make_shared<const VerbsDevice>("", options.rdma.gid_index));
  return rails;
}

}  // namespace

Rail::Rail(std::shared_ptr<const VerbsDevice> rail_device)
    : device(std::move(rail_device)),
      local_regions(device),
      completions(ibv_create_comp_channel(device->context())),
      chunk_bytes(std::min<std::uint64_t>(kMaxChunk, device->max_message_size())) {
  if (!completions) throw_errno(ErrorCode::Transport, "ibv_create_comp_channel");
  if (chunk_bytes == 0) chunk_bytes = kMaxChunk;
  set_nonblocking(completions->fd);
}

std::shared_ptr<Engine> Engine::create(const TransportContext& context) {
  std::shared_ptr<Engine> engine(new Engine(context));
  engine->loop_.start();
  return engine;
}

Engine::Engine(const TransportContext& context)
    : connector_name_(context.connector_name),
      log_(context.options.log),
      events_log_(context.events),
      telemetry_(context.telemetry),
      connect_timeout_(context.options.connect_timeout),
      max_connections_(context.options.max_connections),
      max_connections_per_peer_(context.options.max_connections_per_peer),
      events_(rdma_create_event_channel()),
      timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      faults_(context.options.rdma.max_access_faults, context.options.rdma.access_fault_window),
      keys_(std::make_shared<KeyBudget>(context.options.rdma.max_remote_keys, context.telemetry)),
      active_(*this, context.options.rdma.slice_size, log_),
      passive_(*this, context.registrations) {
  const auto& access = context.options.rdma.access;
  if (access != "auto" && access != "windows" && access != "connection_pd")
    throw Error(ErrorCode::InvalidArgument,
                "rdma.access must be auto, windows or connection_pd, got '" + access + "'");
  if (!events_) throw_errno(ErrorCode::Transport, "rdma_create_event_channel");
  if (!timer_) throw_errno(ErrorCode::Transport, "timerfd_create");
  set_nonblocking(events_->fd);
  for (auto& device : open_rails(context.options, log_, context.telemetry)) {
    if (access == "windows" && !device->binds_windows())
      throw Error(ErrorCode::Transport, "rdma.access is windows, but " + device->name() +
                                            " has no type-2 memory windows");
    rails_.push_back(std::make_unique<Rail>(std::move(device)));
    auto& rail = *rails_.back();
    rail.own_pd_per_peer =
        access == "connection_pd" || (access == "auto" && !rail.device->binds_windows());
    listen(rail);
    log("verbs: rail " + std::to_string(rails_.size() - 1) + ": " + rail.device->name() + " port " +
        std::to_string(rail.device->port()) + ", GID index " +
        std::to_string(rail.device->gid_index()) + ", listening on " + rail.address +
        ", peers' access by " +
        (rail.own_pd_per_peer ? "a protection domain per connection" : "type-2 memory windows"));
  }
  loop_.watch(events_->fd, [this] {
    on_cm_events();
    after_handler();
  });
  for (std::size_t index = 0; index < rails_.size(); ++index) {
    loop_.watch(rails_[index]->completions->fd, [this, index] {
      on_completions(*rails_[index]);
      after_handler();
    });
    // Port state changes: a port that goes down fails its rail's connections at once.
    const int async_fd = rails_[index]->device->context()->async_fd;
    set_nonblocking(async_fd);
    loop_.watch(async_fd, [this, index] {
      on_async_events(index);
      after_handler();
    });
  }
  loop_.watch(timer_.get(), [this] {
    on_timer();
    after_handler();
  });
}

Engine::~Engine() { shutdown(); }

void Engine::listen(Rail& rail) {
  const auto& device = *rail.device;
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(events_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
    throw_errno(ErrorCode::Transport, "rdma_create_id");
  rail.listener.reset(raw);
  auto address = ipv4_address(device.ipv4(), 0);
  if (rdma_bind_addr(raw, reinterpret_cast<sockaddr*>(&address)) != 0)
    throw_errno(ErrorCode::Transport, "rdma_bind_addr " + device.ipv4());
  if (raw->verbs != device.context())
    throw Error(ErrorCode::Transport,
                device.ipv4() + " does not belong to RDMA device " + device.name());
  if (rdma_listen(raw, kBacklog) != 0) throw_errno(ErrorCode::Transport, "rdma_listen");
  rail.address = device.ipv4() + ":" + std::to_string(ntohs(rdma_get_src_port(raw)));
}

void Engine::shutdown() {
  // Notices already queued (a Result whose owner was just woken) still go out, briefly: not
  // waited for by a thread running the engine itself (a handler's callback closing the
  // connector), which would wait for itself.
  if (!loop_.holds_work()) {
    std::promise<void> flushed;
    auto done = flushed.get_future();
    if (run_on_loop([this, &flushed] {
          flushed_ = &flushed;
          after_handler();
        }))
      done.wait_for(kFlushOnClose);
  }
  loop_.stop();
  // The progress thread is gone, and a waiter that ran the engine has let go: what they owned
  // is ours now.
  const auto work = loop_.holds_work() ? ProgressLoop::Work() : loop_.take_work();
  flushed_ = nullptr;
  std::vector<std::shared_ptr<Connection>> all;
  for (const auto& [id, connection] : connections_) all.push_back(connection);
  const Error closing(ErrorCode::Cancelled, "the connector is shutting down");
  for (const auto& connection : all) fail_connection(*connection, closing);
  active_.fail_all(closing);
  bury();
  for (auto& rail : rails_) rail->listener.reset();
}

void Engine::after_handler() {
  active_.resume_orphans();  // transfers that lost a leg go on
  bury();
  if (flushed_ == nullptr) return;
  for (const auto& [id, connection] : connections_)
    if (connection->state == Connection::State::Established && connection->notices_pending())
      return;
  flushed_->set_value();
  flushed_ = nullptr;
}

std::function<void()> Engine::later(std::function<void()> work) {
  return [weak = weak_from_this(), work = std::move(work)] {
    if (auto engine = weak.lock()) engine->run_on_loop(work);
  };
}

bool Engine::run_on_loop(std::function<void()> work) {
  return loop_.post([this, work = std::move(work)] {
    work();
    after_handler();
  });
}

void Engine::start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer) {
  // Under a request grant, a run outside its blocks would meet the NIC's refusal and break the
  // connection: refused here first, with the reason.
  for (const auto window : transfer->request().segment_windows)
    if (window == TransferRequest::kNoWindow) {
      transfer->fail(Error(ErrorCode::AccessDenied,
                           "blocks outside those granted for the request (refused before "
                           "any byte moved)"));
      return;
    }
  const auto seq = active_.next_seq();
  // The failure notifier may run on any thread (a cancel, a drop); the abort runs on ours.
  transfer->set_failure_notifier([weak = weak_from_this(), seq](const Error& error) {
    if (auto engine = weak.lock())
      engine->run_on_loop([raw = engine.get(), seq, error] { raw->active_.abort(seq, error); });
  });
  // Its waiter may read the completions that end it itself.
  std::uint64_t bytes = 0;
  for (const auto& descriptor : transfer->local()) bytes += descriptor.size();
  transfer->drive_waits_with(weak_from_this(), bytes);
  // Here, if no other thread runs the engine and nothing waits in its queue (transfers begun
  // in order stay in order: a pool's tags arrive in it): the Begin (or a pool's first READ)
  // leaves now, without waking the progress thread. Kept alive meanwhile: a failure's callback
  // may drop the connector.
  const auto keep = shared_from_this();
  if (!loop_.commands_queued())
    if (const BorrowedWork work(*this, seq); work) {
      if (loop_.stopping()) {
        transfer->fail(Error(ErrorCode::Cancelled, "the verbs transport is shutting down"));
        return;
      }
      active_.begin(transfer, offer, seq);
      arm_timer();  // watches its legs for stalls
      return;
    }
  if (!run_on_loop([this, transfer, offer, seq] {
        active_.begin(transfer, offer, seq);
        arm_timer();
      }))
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
          if (rails_.size() > 1) {
            std::uint8_t ack_timeout = kMultiRailAckTimeout;
            rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                            sizeof ack_timeout);  // best effort: the default is only slower
          }
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
                          Error(ErrorCode::PeerLost, "verbs: RDMA device " +
                                                         rails_[connection.rail]->device->name() +
                                                         " was removed"));
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
  const auto rail = std::find_if(rails_.begin(), rails_.end(), [&](const auto& candidate) {
    return candidate->device->context() == id->verbs;
  });
  if (!peer || rail == rails_.end()) {
    rdma_reject(id, nullptr, 0);
    return;
  }
  // Each accepted connection costs a queue pair and its buffers: capped in total and per host.
  const auto endpoint = format_endpoint(rdma_get_peer_addr(id));
  const auto host = endpoint.substr(0, endpoint.rfind(':'));
  // A source that keeps ending its connections in access errors is guessing keys: refused for
  // a while, so that a guess costs more than a reconnect.
  if (const auto refusal = faults_.refused(host, std::chrono::steady_clock::now());
      refusal.refused) {
    if (refusal.first)
      events_log_->write(
          LogLevel::Warn, "connection_refused",
          "verbs: connections from " + host + " refused: " + std::to_string(faults_.limit()) +
              " access faults within " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(faults_.window()).count()) +
              " s",
          LogFields().peer(host).transport("verbs"));
    if (telemetry_) telemetry_->connection_refused();
    rdma_reject(id, nullptr, 0);
    return;
  }
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
  auto connection = std::make_shared<Connection>((*rail)->device, (*rail)->completions.get(),
                                                 std::move(owned), false, *peer, endpoint);
  connection->rail = static_cast<std::size_t>(rail - rails_.begin());
  try {
    if ((*rail)->own_pd_per_peer) connection->use_own_protection_domain();
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
  if (telemetry_) telemetry_->connection_opened("verbs", Direction::Inbound);
  connections_[id] = std::move(connection);
  arm_timer();
}

std::shared_ptr<Connection> Engine::connect(const std::string& peer, const std::string& address,
                                            std::size_t rail) {
  const auto key = peer + "@" + address + "#" + std::to_string(rail);
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
  // From the rail's address, so that the route goes through the rail's device.
  const auto& device = rails_[rail]->device;
  auto source = ipv4_address(device->ipv4(), 0);
  if (rdma_resolve_addr(raw, reinterpret_cast<sockaddr*>(&source),
                        reinterpret_cast<sockaddr*>(&*destination),
                        timeout_ms(connect_timeout_)) != 0)
    throw_errno(ErrorCode::PeerLost, "verbs: cannot resolve " + address);
  auto connection = std::make_shared<Connection>(device, rails_[rail]->completions.get(),
                                                 std::move(id), true, peer, address);
  connection->rail = rail;
  connection->deadline = std::chrono::steady_clock::now() + connect_timeout_;
  if (telemetry_) telemetry_->connection_opened("verbs", Direction::Outbound);
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
  const bool posted = connection.establish() && active_.announce_legs(connection);
  arm_timer();
  if (!posted)
    fail_connection(connection, Error(ErrorCode::Transport,
                                      "verbs: cannot post to the QP of " + describe(connection) +
                                          " (or it has left notices unread too long)"));
}

// ---- completions ----------------------------------------------------------------------------

void Engine::on_notice(Connection& connection, const Notice& notice) {
  switch (notice.type) {
    case NoticeType::Begin:
    case NoticeType::Done:
    case NoticeType::Abort:
    case NoticeType::PoolBegin:
    case NoticeType::PoolDone:
    case NoticeType::PoolAbort:
      passive_.on_notice(connection, notice);
      return;
    case NoticeType::Accept:
    case NoticeType::Result:
    case NoticeType::Keys:
      active_.on_notice(connection, notice);
      return;
    case NoticeType::Credits:
      return;  // taken in handle()
  }
}

void Engine::send(Connection& connection, const Notice& notice) {
  if (!connection.send(notice))
    fail_connection(connection, Error(ErrorCode::Transport,
                                      "verbs: cannot post to the QP of " + describe(connection) +
                                          " (or it has left notices unread too long)"));
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
  if (error.code() != ErrorCode::Cancelled)
    rails_[connection.rail]->failed_at = std::chrono::steady_clock::now();
  // Freed once the current handler returns: the caller may still hold a reference.
  if (auto found = connections_.find(connection.id()); found != connections_.end()) {
    if (telemetry_)
      telemetry_->connection_closed("verbs",
                                    connection.outgoing ? Direction::Outbound : Direction::Inbound);
    graveyard_.push_back(found->second);
    connections_.erase(found);
  }
  std::erase_if(pool_, [&](const auto& entry) { return entry.second.get() == &connection; });
  arm_timer();

  // The legs it carried give their slices back; their transfers go on over the rails left.
  active_.on_connection_lost(connection.rail, std::move(outbound), error, culprit, culprit_error);
  // A registration fails with the last connection that began it: the peer's other rails may
  // still carry its transfer.
  passive_.on_connection_lost(inbound, error);
}

}  // namespace memwire::detail::verbs
