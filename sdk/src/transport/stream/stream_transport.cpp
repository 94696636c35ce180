#include "transport/stream/stream_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/registration.hpp"
#include "core/transfer_budget.hpp"
#include "cuda/gpu_pool_memory.hpp"
#include "transport/stream/accepted_connections.hpp"
#include "transport/stream/accepted_socket.hpp"
#include "transport/stream/cuda_ipc_request.hpp"
#include "transport/stream/direct_read.hpp"
#include "transport/stream/event_loops.hpp"
#include "transport/stream/refused_sockets.hpp"
#include "transport/stream/request_plan.hpp"
#include "transport/stream/stream_active_side.hpp"
#include "transport/stream/stream_passive_side.hpp"

namespace memwire::detail {
namespace {

using Connections = std::vector<std::shared_ptr<StreamConnection>>;
using OutboundConnections = std::vector<std::shared_ptr<OutboundConnection>>;

class StreamTransport final : public Transport {
 public:
  StreamTransport(const TransportContext& context, StreamSettings settings)
      : context_(context),
        settings_(std::move(settings)),
        loops_("memwire-" + settings_.name, context_.options.stream),
        accepted_(std::make_shared<AcceptedConnections>(AcceptedConnections::Limits{
            context_.options.max_connections, context_.options.max_connections_per_peer,
            context_.options.stream.max_hello_only_connections,
            context_.options.stream.max_shared_connections})) {
    // Non-blocking: the loop accepts until EAGAIN.
    ::fcntl(settings_.listener.get(), F_SETFL,
            ::fcntl(settings_.listener.get(), F_GETFL) | O_NONBLOCK);
    watch_listener();
    listener_loop().post([this] { sweep_hello_only(); });
  }

  ~StreamTransport() override {
    stopping_ = true;
    listener_loop().post([this] { listener_loop().remove(settings_.listener.get()); });
    Connections all;
    {
      std::lock_guard lock(mutex_);
      for (auto& [peer, connections] : pool_)
        all.insert(all.end(), connections.begin(), connections.end());
      all.insert(all.end(), retired_.begin(), retired_.end());
      pool_.clear();
      retired_.clear();
    }
    {
      auto accepted = accepted_->take_all();
      all.insert(all.end(), accepted.begin(), accepted.end());
    }
    // Answers already queued (completion acknowledgements) still go out, briefly.
    for (auto& connection : all) connection->close_when_sent(std::chrono::milliseconds(500));
    // Closed by the loop, their handlers told, before the loop itself goes.
    for (auto& connection : all) connection->join();
    // Now, while what its last tasks touch is still here.
    loops_.stop();
  }

  std::string_view name() const override { return settings_.name; }
  TransportOffer offer(Registration& registration) override {
    // A one-shot operation over GPU memory, on a transport of one host: its owner copies
    // through CUDA IPC for a peer whose memory is on a GPU too. Said in the offer, so that a
    // peer never sends such requests to an owner that predates them (PROTOCOL.md).
    if (!same_host() || registration.staging() == nullptr) return settings_.offer;
    auto offer = settings_.offer;
    static_assert(kCudaIpcVersion == 2, "kCudaIpcAttributeValue says the version");
    offer.attributes[kCudaIpcAttribute] = kCudaIpcAttributeValue;
    return offer;
  }
  bool can_reach(const TransportOffer& offer) const override { return settings_.can_reach(offer); }

  bool serves_pools() const override { return true; }
  // One host: its passive side takes CUDA IPC requests (stream_passive_gpu).
  bool copies_through_cuda_ipc() const override { return same_host(); }

  StartResult start(const std::shared_ptr<ActiveTransfer>& transfer,
                    const TransportOffer& offer) override {
    const auto& request = transfer->request();
    const auto* header = request.header ? &*request.header : nullptr;
    // Planned for CUDA IPC (the same host over shm): no other path reaches its device memory.
    const bool cuda_ipc = transfer->cuda_ipc() != nullptr;
    if (cuda_ipc && !same_host())
      return StartResult::cannot(
          "a GPU transfer planned for CUDA IPC needs shm; start it again to stage it");
    std::string unusable;
    // Transfers under a header take one connection: no second is dialled for them, to sit
    // Hello-only at the owner (which closes such connections first).
    auto connections =
        connections_to(offer.address, unusable,
                       header ? 1 : std::max(1u, context_.options.tcp.connections_per_peer));
    if (connections.empty()) return StartResult::cannot(unusable);
    // Each transfer starts on the next connection: many one-chunk transfers in flight spread
    // over all of them instead of queueing on the first. Transfers under a header all take the
    // first: their tags then reach the owner in the order they were sent, after their bytes,
    // and the owner knows which connection a tagged transfer was in the middle of when it breaks.
    const std::size_t first =
        header ? 0 : next_first_connection_.fetch_add(1, std::memory_order_relaxed);
    if (header) connections.resize(1);
    // An untagged pool READ that the owner lets us do ourselves: no request at all.
    if (header && same_host() &&
        read_directly(*transfer, *connections.front(), *settings_.same_host))
      return StartResult::taken();
    auto state = std::make_shared<StreamTransfer>();
    state->transfer = transfer;
    state->notice_connection = connections[first % connections.size()];
    if (header) {
      state->pool_transfer_id = next_pool_transfer_.fetch_add(1, std::memory_order_relaxed);
      if (!header->tag.empty())
        state->pool_notice = transfer->kind() == OperationKind::Read ? PoolNotice::AfterAnswers
                                                                     : PoolNotice::Pipelined;
    }
    install_failure_notifier(*transfer, state);

    const auto chunk_size = std::max<std::uint64_t>(context_.options.tcp.chunk_size, 4096);
    // Through CUDA IPC the owner copies a request device to device at once: chunks would only
    // add round trips, so requests are cut only by their piece count.
    constexpr auto kWhole = std::uint64_t{1} << 62;
    const auto requests = plan_requests(request.segments, cuda_ipc ? kWhole : chunk_size);
    add_breaker(*transfer, *state, connections, first, requests.size());
    state->chunks_left = requests.size();
    state->single_request = requests.size() == 1 && !header;
    if (state->pool_notice == PoolNotice::Pipelined && requests.size() == 1)
      state->pool_notice = PoolNotice::InRequest;
    state->bytes_by_loop = header && !cuda_ipc && transfer->kind() == OperationKind::Write &&
                           socket_bytes(requests, same_host()) >= kLoopSendsFrom;

    const bool reading = transfer->kind() == OperationKind::Read;
    auto lost = [&](OutboundConnection& connection) {
      if (transfer->gate().is_open()) {
        const auto why = connection.close_reason();
        transfer->fail(Error(ErrorCode::PeerLost, "connection to " + offer.address + " lost" +
                                                      (why.empty() ? "" : ": " + why)));
      }
    };
    for (std::size_t n = 0; n < requests.size(); ++n) {
      auto& connection = *connections[(first + n) % connections.size()];
      const bool sent = requests[n].pieces.size() == 1 && !header && !cuda_ipc
                            ? send_chunk(connection, state, requests[n], reading)
                            : send_pieces(connection, state, requests[n], reading, n == 0);
      if (!sent) {
        lost(connection);
        return StartResult::taken();  // and failed: the peer is gone, no other transport helps
      }
    }
    // A write's tag goes right behind its bytes: the owner reads the frames of a connection in
    // order, so it has them all in memory when the tag arrives, and one round trip ends both.
    if (state->pool_notice == PoolNotice::Pipelined) send_completion_notice(state);
    return StartResult::taken();
  }

 private:
  OutFrame request_frame(const ActiveTransfer& transfer, const StreamTransfer& state) const {
    OutFrame frame;
    frame.header.key = transfer.key();
    frame.header.token = transfer.token();
    if (state.single_request) frame.header.flags = frame_flags::kCompletes;
    if (const auto& header = transfer.request().header) {
      // The tag rides after the piece list (send_pieces appends it).
      mark_pool_frame(frame.header,
                      transfer.kind() == OperationKind::Read ? FrameType::PoolReadRequest
                                                             : FrameType::PoolWriteRequest,
                      state.pool_transfer_id, *header);
      if (state.pool_notice == PoolNotice::InRequest)
        frame.header.flags |= frame_flags::kLastOfTransfer;
    }
    return frame;
  }

  // A one-piece request: the single-block frames. False when the connection is gone (or the
  // transfer already cancelled).
  bool send_chunk(OutboundConnection& connection, const std::shared_ptr<StreamTransfer>& state,
                  const Request& request, bool reading) {
    const auto& transfer = state->transfer;
    const auto& chunk = request.pieces.front();
    auto* memory = chunk.local;
    auto frame = request_frame(*transfer, *state);
    frame.header.type = reading ? FrameType::ReadRequest : FrameType::WriteRequest;
    frame.header.index = chunk.index;
    frame.header.offset = chunk.offset;
    frame.header.length = chunk.length;
    std::uint64_t id = 0;
    auto& active = connection.active();
    if (travels_cross_memory(same_host(), chunk.length)) {
      // The passive side copies into or out of `memory` itself: keep it pinned until it says so.
      auto pin = transfer->gate().pin();
      if (!pin) return false;  // already cancelled
      frame.header.flags |= frame_flags::kCrossMemory | frame_flags::kMapByDescriptor;
      frame.header.peer_address = reinterpret_cast<std::uintptr_t>(memory);
      id = active.expect(state, nullptr, chunk.length, std::move(pin), memory);
    } else {
      id = active.expect(state, reading ? memory : nullptr, chunk.length);
      if (!reading) {
        frame.data = memory;
        frame.gate = &transfer->gate();
        frame.keep_alive = transfer;
      }
      // Its answer ends it (no notice follows): a thread waiting for it may read it itself, if
      // small (a large one's wake-up is a small part of its time: the loop reads it).
      if (state->single_request && id != 0 && chunk.length <= kMostBytesForWaiterToRead)
        transfer->drive_waits_with(connection.weak_from_this(), id);
    }
    frame.header.request_id = id;
    return id != 0 && connection.send(std::move(frame));
  }

  // Many blocks in one request: the piece list, and over a socket their bytes straight between
  // it and the blocks (a write's after the list, a read's in the answer).
  bool send_pieces(OutboundConnection& connection, const std::shared_ptr<StreamTransfer>& state,
                   const Request& request, bool reading, bool first) {
    const auto& transfer = state->transfer;
    const auto* gpu = transfer->cuda_ipc();
    // Through CUDA IPC, the owner copies however small the request: no other path exists.
    const bool cross = gpu != nullptr || travels_cross_memory(same_host(), request.length);
    std::vector<FramePiece> pieces;
    std::vector<iovec> memory;
    pieces.reserve(request.pieces.size());
    memory.reserve(request.pieces.size());
    for (const auto& piece : request.pieces) {
      auto* block = piece.local;
      memory.push_back({block, static_cast<std::size_t>(piece.length)});
      pieces.push_back({piece.index, 0, piece.offset, piece.length,
                        cross ? reinterpret_cast<std::uintptr_t>(block) : 0});
    }
    const auto ipc_table =
        gpu != nullptr ? ipc_allocations_for(*gpu, pieces) : std::vector<FrameIpcAllocation>{};
    auto frame = request_frame(*transfer, *state);
    const auto& header = transfer->request().header;
    if (!header)
      frame.header.type = reading ? FrameType::ReadPiecesRequest : FrameType::WritePiecesRequest;
    frame.header.index = static_cast<std::uint32_t>(pieces.size());
    frame.header.length = request.length;
    frame.text.assign(reinterpret_cast<const char*>(pieces.data()),
                      pieces.size() * sizeof(FramePiece));
    if (header) frame.text += header->tag;
    if (gpu != nullptr) mark_cuda_ipc(frame, ipc_table);
    std::uint64_t id = 0;
    auto& active = connection.active();
    if (cross) {
      // The passive side copies into or out of the blocks itself, or (its memory a SharedBuffer)
      // says where they are and we copy: pinned until its answer has been handled.
      auto pin = transfer->gate().pin();
      if (!pin) return false;  // already cancelled
      frame.header.flags |= frame_flags::kCrossMemory;
      // Not a tagged pool write: its tag must reach the owner after its bytes (PROTOCOL.md).
      const bool may_map = gpu == nullptr && (reading || state->pool_notice == PoolNotice::None);
      if (may_map) frame.header.flags |= frame_flags::kMapByDescriptor;
      id = active.expect(state, nullptr, request.length, std::move(pin), nullptr, {},
                         may_map ? std::move(memory) : std::vector<iovec>{});
    } else if (reading) {
      id = active.expect(state, nullptr, request.length, std::nullopt, nullptr, std::move(memory));
      // An untagged pool READ of one small request ends with its answer, as a one-shot READ
      // does: a thread waiting for it may read that answer itself.
      if (id != 0 && header && state->pool_notice == PoolNotice::None && state->chunks_left == 1 &&
          request.length <= kMostBytesForWaiterToRead)
        transfer->drive_waits_with(connection.weak_from_this(), id);
    } else {
      if (state->bytes_by_loop && first) {
        // Queued for the loop, the first request leaves whole, pinned from now: the owner
        // admits its transfer whatever a cancel does meanwhile, so that the cancel ends the
        // tag's waits there (as when the caller wrote it at once; a transfer no request of
        // reached the owner is unknown to it, and its failure ends no wait).
        frame.pin = transfer->gate().pin();
        if (!frame.pin) return false;  // already cancelled
      }
      id = active.expect(state, nullptr, request.length);
      frame.pieces = std::move(memory);
      frame.gate = &transfer->gate();
      frame.keep_alive = transfer;
      frame.operation = transfer.get();
      frame.by_loop = state->bytes_by_loop;
    }
    frame.header.request_id = id;
    return id != 0 && connection.send(std::move(frame));
  }

  // A peer that stalls must not keep a cancelled transfer's buffers hostage: the connections
  // that carry its requests (and so may hold its pins: bytes queued to go, an answer landing)
  // break if they still do once it ended. One breaker for them all, the transfer's own.
  static void add_breaker(ActiveTransfer& transfer, const StreamTransfer& state,
                          const OutboundConnections& connections, std::size_t first,
                          std::size_t requests) {
    const auto holder = reinterpret_cast<std::uintptr_t>(&state);
    const auto carriers = std::min(requests, connections.size());
    constexpr const char* kWhy = "transfer ended while the peer stalled";
    if (carriers == 1) {  // a small transfer: one weak pointer, no vector of them
      transfer.gate().add_breaker(holder,
                                  [weak = std::weak_ptr(connections[first % connections.size()])] {
                                    if (auto alive = weak.lock()) alive->shutdown(kWhy);
                                  });
      return;
    }
    std::vector<std::weak_ptr<OutboundConnection>> used;
    used.reserve(carriers);
    for (std::size_t n = 0; n < carriers; ++n)
      used.emplace_back(connections[(first + n) % connections.size()]);
    transfer.gate().add_breaker(holder, [used = std::move(used)] {
      for (const auto& weak : used)
        if (auto alive = weak.lock()) alive->shutdown(kWhy);
    });
  }

  static void install_failure_notifier(ActiveTransfer& transfer,
                                       const std::shared_ptr<StreamTransfer>& state) {
    // The frame is made now: the notifier lives in the transfer, and must not keep it alive.
    auto notice = notice_frame(transfer, state->pool_transfer_id);
    transfer.set_failure_notifier([weak = state->notice_connection, header = notice.header,
                                   tag = std::move(notice.text)](const Error& error) {
      auto connection = weak.lock();
      if (!connection) return;
      OutFrame frame;
      frame.header = header;
      frame.header.code = wire_code(error.code());
      frame.text = tag + std::string(error.message()).substr(0, FrameHeader::kMaxText - tag.size());
      connection->send(std::move(frame));
    });
  }

  // Pooled connections to `address`, at least `wanted` of them, dialling the missing ones; dead
  // ones are replaced. Empty, with `unusable` set, when the dial says this transport cannot
  // reach the peer.
  OutboundConnections connections_to(const std::string& address, std::string& unusable,
                                     std::size_t wanted) {
    Connections finished;  // dropped outside the lock
    std::size_t missing = 0;
    {
      std::lock_guard lock(mutex_);
      auto& connections = pool_[address];
      // Idle for half the idle limit (the peer's, if it has ours): closed here before the peer
      // closes it, so that a request never goes out on a connection the peer is closing.
      const auto stale = context_.options.stream.idle_timeout / 2;
      // One that never carried a request is still Hello-only to the peer, which closes it after
      // its hello_only_timeout: retired at half of it, as an idle one is.
      const auto unproven = context_.options.stream.hello_only_timeout / 2;
      std::erase_if(connections, [&](const auto& connection) {
        if (connection->alive()) {
          const bool idle =
              stale.count() != 0 && connection->idle_for() >= stale && connection->active().idle();
          const bool never_used = unproven.count() != 0 &&
                                  !connection->active().carried_requests() &&
                                  connection->age() >= unproven;
          if (!idle && !never_used) return false;
          connection->shutdown("connection closed");
        }
        retired_.push_back(connection);
        return true;
      });
      move_finished(retired_, finished);
      // Not retired by a concurrent caller between here and this caller's first send.
      for (const auto& connection : connections) connection->mark_in_use();
      if (connections.size() >= wanted) return connections;
      missing = wanted - connections.size();
    }
    // Dialled without the lock: a dial that waits for its answer (shm's Hello) to this very
    // transport (a connector reading its own operation) needs the loop, which takes it.
    OutboundConnections dialled;
    for (std::size_t n = 0; n < missing; ++n) {
      auto connection = dial(address, unusable);
      if (!connection) break;
      dialled.push_back(std::move(connection));
    }
    std::lock_guard lock(mutex_);
    auto& connections = pool_[address];
    for (auto& connection : dialled) {
      if (connections.size() < wanted) {
        connections.push_back(std::move(connection));
      } else {  // another caller dialled meanwhile
        connection->shutdown("connection closed");
        retired_.push_back(std::move(connection));
      }
    }
    return connections;
  }

  // Null, with `unusable` set, when the transport cannot reach that peer.
  std::shared_ptr<OutboundConnection> dial(const std::string& address, std::string& unusable) {
    auto dialled = settings_.dial(address, context_.options.connect_timeout);
    if (!dialled.unusable.empty()) {
      unusable = std::move(dialled.unusable);
      return nullptr;
    }
    auto connection = std::make_shared<OutboundConnection>(
        std::move(dialled.socket), same_host() ? settings_.same_host->peer() : nullptr, address,
        next_loop(), dialled.direct_reads_from);
    connection->watch(std::make_unique<ConnectionWatch>(
        context_.telemetry, context_.events, settings_.name, Direction::Outbound, address));
    connection->run();
    if (!same_host()) {  // a cross-memory dial already said hello, with its credentials
      OutFrame hello;
      hello.header.type = FrameType::Hello;
      hello.text = context_.connector_name.substr(0, FrameHeader::kMaxText);
      connection->send(std::move(hello));
    }
    return connection;
  }

  void watch_listener() {
    listener_loop().add(settings_.listener.get(), EPOLLIN,
                        [this](std::uint32_t) { accept_ready(); });
  }

  // On the loop: takes every pending connection. Never spins: out of descriptors, a pending
  // connection is dropped through a reserve descriptor, and if even that fails the listener is
  // left alone until a connection ends (or a second passes).
  void accept_ready() {
    for (;;) {
      if (stopping_.load()) return;
      FileDescriptor socket(::accept4(settings_.listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (socket) {
        admit(std::move(socket));
        continue;
      }
      if (errno == EMFILE || errno == ENFILE) {
        if (!reserve_) return pause_listener();
        reserve_.reset();  // one descriptor free: take the connection and close it
        const bool taken =
            FileDescriptor(::accept4(settings_.listener.get(), nullptr, nullptr, SOCK_CLOEXEC))
                .get() >= 0;
        reserve_ = open_reserve();
        // Out of descriptors, accept says so before it looks for a pending connection: with
        // one free, "none pending" is the answer that ends the round.
        if (!taken) return;
        log(LogLevel::Warn, "connection_refused",
            "out of file descriptors: a new connection was closed", "");
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      return;  // EAGAIN: every pending connection taken (or the listener was shut down)
    }
  }

  void pause_listener() {
    listener_paused_ = true;
    listener_loop().remove(settings_.listener.get());
    listener_loop().after(std::chrono::seconds(1), [this] { resume_listener(); });
  }

  // Edge-triggered: watching it again reports the connections that waited meanwhile.
  void resume_listener() {
    if (!listener_paused_ || stopping_.load()) return;
    listener_paused_ = false;
    if (!reserve_) reserve_ = open_reserve();
    watch_listener();
  }

  void admit(FileDescriptor socket) {
    const auto credentials = peer_credentials(socket.get());
    const int process = credentials ? credentials->pid : 0;
    auto peer = peer_identity(socket.get(), process);
    // Hello-only connections make room for a new one (the oldest first); only connections that
    // stand higher refuse it.
    auto room = accepted_->make_room(peer);
    for (const auto& evicted : room.evicted) close_evicted(*evicted, room.why_evicted);
    if (room.refusal) {
      log(LogLevel::Warn, "connection_refused",
          "connection from " + peer + " closed: " + *room.refusal, peer);
      refuse_connection(socket.get(), *room.refusal);
      refused_.linger(std::move(socket));
      return;
    }
    auto transfers = std::make_unique<TransferBudget::Account>(
        context_.transfer_budget, peer,
        credentials ? std::optional<uid_t>(credentials->uid) : std::nullopt);
    // A peer the kernel does not vouch for (no process) gets no cross-memory copies; one it
    // does proves with its Hello that it is that process (SameHostOwner::check_hello).
    if (same_host() && process != 0) pass_credentials(socket.get(), true);
    auto handler = std::make_unique<StreamPassiveSide>(
        context_.registrations, process, settings_.name, std::move(transfers),
        same_host() && process != 0 ? settings_.same_host->owner(process, credentials->uid)
                                    : nullptr);
    auto* passive = handler.get();
    passive->stand_in(accepted_);
    auto connection = std::make_shared<StreamConnection>(std::move(socket), std::move(handler),
                                                         settings_.name + " peer", next_loop());
    passive->bind(connection);
    connection->watch(std::make_unique<ConnectionWatch>(context_.telemetry, context_.events,
                                                        settings_.name, Direction::Inbound, peer));
    connection->limit_idle(context_.options.stream.idle_timeout);
    connection->limit_queued_bytes(
        std::max<std::size_t>(context_.options.stream.max_queued_answer_bytes, 1));
    accepted_->add(connection, std::move(peer));
    // Once closed, it gives its descriptor back at once, and a paused listener resumes.
    connection->run(context_.options.stream.handshake_timeout, [this] {
      listener_loop().post([this] {
        reclaim_accepted();
        resume_listener();
      });
    });
  }

  // On the listener loop, a quarter of hello_only_timeout apart: closes the connections still
  // Hello-only after it (no request of theirs admitted, whatever else they sent). One timer for
  // all, however many connections come.
  void sweep_hello_only() {
    const auto bound = context_.options.stream.hello_only_timeout;
    if (bound.count() <= 0 || stopping_.load()) return;
    for (const auto& late : accepted_->overdue(bound))
      close_evicted(*late, "closed by the owner: no request of it was admitted within " +
                               std::to_string(bound.count()) + " ms (hello_only_timeout)");
    listener_loop().after(std::max<std::chrono::milliseconds>(bound / 4, kLeastSweepPeriod),
                          [this] { sweep_hello_only(); });
  }
  static constexpr auto kLeastSweepPeriod = std::chrono::milliseconds(10);

  // Closes a Hello-only connection the owner needs the room of (or gave its time), telling the
  // peer why: its connector fails what it had begun there with that reason.
  void close_evicted(StreamConnection& connection, const std::string& why) {
    log(LogLevel::Info, "connection_closed", "connection from " + connection.peer() + " " + why,
        connection.peer());
    OutFrame notice;
    notice.header.type = FrameType::HelloResponse;
    notice.header.code = wire_code(ErrorCode::Transport);
    notice.text = why.substr(0, FrameHeader::kMaxText);
    connection.send(std::move(notice));  // an idle connection's socket takes it at once
    connection.shutdown(why);
  }

  // Connections whose threads ended give their descriptors back now, not at the next accept.
  // What they held goes back to the system too, when enough did (TransferBudget::trim_if_due),
  // a moment later: the last references to a connection (a task, a frame) may outlive this.
  void reclaim_accepted() {
    { auto finished = accepted_->take_finished(); }  // dropped here, outside its lock
    listener_loop().after(kTrimDelay, [this] { context_.transfer_budget->trim_if_due(); });
  }
  static constexpr auto kTrimDelay = std::chrono::milliseconds(100);

  static FileDescriptor open_reserve() {
    return FileDescriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }

  void log(LogLevel level, std::string_view event, const std::string& line,
           std::string_view peer) const {
    context_.events->write(level, event, settings_.name + ": " + line,
                           LogFields().peer(peer).transport(settings_.name));
  }

  // A closed connection is dropped only once its threads are done: until then one of them may
  // be the caller, or hold a reference whose release would make it join itself.
  static void move_finished(Connections& from, Connections& into) {
    std::erase_if(from, [&](const auto& connection) {
      if (!connection->finished()) return false;
      into.push_back(connection);
      return true;
    });
  }

  const TransportContext& context_;
  StreamSettings settings_;
  // One host (shm): requests may ask for cross-memory copies and mapped answers.
  bool same_host() const noexcept { return settings_.same_host != nullptr; }
  // Every connection's I/O, and the listener's. Declared before the connections, so they
  // outlive them.
  EventLoops loops_;
  EventLoop& listener_loop() { return loops_.listener(); }
  EventLoop& next_loop() { return loops_.next(); }
  FileDescriptor reserve_ = open_reserve();    // the loop's
  bool listener_paused_ = false;               // the loop's
  RefusedSockets refused_{loops_.listener()};  // the listener loop's
  std::mutex mutex_;
  std::map<std::string, OutboundConnections> pool_;
  // Connections peers opened to us, with their standings.
  const std::shared_ptr<AcceptedConnections> accepted_;
  std::atomic<bool> stopping_{false};
  Connections retired_;  // closed, out of the pool, threads maybe still running
  std::atomic<std::size_t> next_first_connection_{0};
  std::atomic<std::uint64_t> next_pool_transfer_{1};
};

}  // namespace

std::unique_ptr<Transport> make_stream_transport(const TransportContext& context,
                                                 StreamSettings settings) {
  return std::make_unique<StreamTransport>(context, std::move(settings));
}

}  // namespace memwire::detail
