#include "transport/tcp/tcp_transport.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "registration.hpp"
#include "transport/tcp/tcp_active_side.hpp"
#include "transport/tcp/tcp_passive_side.hpp"

namespace memwire::detail {
namespace {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportContext& context)
      : context_(context),
        listener_(listen_tcp(context.options.bind_address, context.options.port)) {
    auto host = context.options.bind_address == "0.0.0.0" ? context.hostname
                                                           : context.options.bind_address;
    address_ = HostPort{host, local_port(listener_.get())}.to_string();
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~TcpTransport() override {
    ::shutdown(listener_.get(), SHUT_RDWR);
    acceptor_.join();
    std::vector<std::shared_ptr<TcpConnection>> all;
    {
      std::lock_guard lock(mutex_);
      for (auto& [peer, connections] : pool_) all.insert(all.end(), connections.begin(), connections.end());
      all.insert(all.end(), accepted_.begin(), accepted_.end());
      pool_.clear();
      accepted_.clear();
    }
    for (auto& connection : all) connection->shutdown("connector shutting down");
    // Destroying them joins their threads.
  }

  std::string_view name() const override { return "tcp"; }

  TransportOffer offer(Registration&) override { return {"tcp", address_, {}, {}}; }

  void start(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer) override {
    auto connections = connections_to(parse_host_port(offer.address));
    auto state = std::make_shared<TcpTransfer>();
    state->transfer = transfer;
    state->notice_connection = connections.front();
    transfer->set_failure_notifier([weak = state->notice_connection, key = transfer->key(),
                                    token = transfer->token()](const Error& error) {
      if (auto connection = weak.lock()) {
        OutFrame frame;
        frame.header.type = FrameType::Notice;
        frame.header.code = wire_code(error.code());
        frame.header.key = key;
        frame.header.token = token;
        frame.text = std::string(error.what()).substr(0, FrameHeader::kMaxText);
        connection->send(std::move(frame));
      }
    });

    struct Chunk {
      std::uint32_t index;
      std::uint64_t offset, length;
    };
    std::vector<Chunk> chunks;
    const auto chunk_size = std::max<std::uint64_t>(context_.options.tcp_chunk_size, 4096);
    const auto& local = transfer->local();
    for (std::uint32_t i = 0; i < local.size(); ++i)
      for (std::uint64_t offset = 0; offset < local[i].size(); offset += chunk_size)
        chunks.push_back({i, offset, std::min<std::uint64_t>(chunk_size, local[i].size() - offset)});
    state->chunks_left = chunks.size();

    const bool reading = transfer->kind() == OperationKind::Read;
    for (std::size_t n = 0; n < chunks.size(); ++n) {
      const auto& chunk = chunks[n];
      auto& connection = *connections[n % connections.size()];
      auto* memory = static_cast<std::byte*>(local[chunk.index].ptr()) + chunk.offset;
      auto id = static_cast<TcpActiveSide&>(connection.handler())
                    .expect(state, reading ? memory : nullptr, chunk.length);
      OutFrame frame;
      frame.header.type = reading ? FrameType::ReadRequest : FrameType::WriteRequest;
      frame.header.request_id = id;
      frame.header.index = chunk.index;
      frame.header.offset = chunk.offset;
      frame.header.length = chunk.length;
      frame.header.key = transfer->key();
      frame.header.token = transfer->token();
      if (!reading) {
        frame.data = memory;
        frame.gate = &transfer->gate();
        frame.keep_alive = transfer;
      }
      if (id == 0 || !connection.send(std::move(frame))) {
        transfer->fail(Error(ErrorCode::PeerLost, "connection to " + offer.address + " lost"));
        return;
      }
    }
  }

 private:
  // Pooled connections to `peer`, dialling the missing ones; dead ones are replaced.
  std::vector<std::shared_ptr<TcpConnection>> connections_to(const HostPort& peer) {
    const auto wanted = std::max(1u, context_.options.tcp_connections_per_peer);
    const auto key = peer.to_string();
    std::vector<std::shared_ptr<TcpConnection>> dead;
    std::lock_guard lock(mutex_);
    auto& connections = pool_[key];
    std::erase_if(connections, [&](const auto& connection) {
      if (connection->alive()) return false;
      dead.push_back(connection);
      return true;
    });
    while (connections.size() < wanted) {
      auto connection = std::make_shared<TcpConnection>(
          connect_tcp(peer, context_.options.connect_timeout), std::make_unique<TcpActiveSide>(), key);
      connection->run();
      OutFrame hello;
      hello.header.type = FrameType::Hello;
      hello.text = context_.connector_name.substr(0, FrameHeader::kMaxText);
      connection->send(std::move(hello));
      connections.push_back(std::move(connection));
    }
    return connections;
  }

  void accept_loop() {
    for (;;) {
      FileDescriptor socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!socket) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
        return;  // the listener was shut down
      }
      auto handler = std::make_unique<TcpPassiveSide>(context_.registrations);
      auto* passive = handler.get();
      auto connection = std::make_shared<TcpConnection>(std::move(socket), std::move(handler),
                                                        "accepted peer");
      passive->bind(connection);
      connection->run();
      std::lock_guard lock(mutex_);
      std::erase_if(accepted_, [](const auto& old) { return !old->alive(); });
      accepted_.push_back(std::move(connection));
    }
  }

  const TransportContext& context_;
  FileDescriptor listener_;
  std::string address_;
  std::thread acceptor_;
  std::mutex mutex_;
  std::map<std::string, std::vector<std::shared_ptr<TcpConnection>>> pool_;
  std::vector<std::shared_ptr<TcpConnection>> accepted_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const TransportContext& context) {
  return std::make_unique<TcpTransport>(context);
}

}  // namespace memwire::detail
