#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "active_transfer.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace memwire::detail {

// One active transfer spread over pooled connections: counts the chunks still out, then sends
// the completion notice on `notice_connection`.
struct TcpTransfer {
  std::shared_ptr<ActiveTransfer> transfer;
  std::weak_ptr<TcpConnection> notice_connection;
  std::atomic<std::size_t> chunks_left{0};
};

// The dialling end of a pooled connection: sends requests and matches responses to them.
class TcpActiveSide final : public FrameHandler {
 public:
  // Registers a request and returns its id; the caller sends the frame.
  std::uint64_t expect(std::shared_ptr<TcpTransfer> transfer, std::byte* destination,
                       std::uint64_t length);

  void on_frame(TcpConnection& connection, const FrameHeader& header) override;
  void on_closed(TcpConnection& connection, const Error& reason) override;

 private:
  struct Pending {
    std::shared_ptr<TcpTransfer> transfer;
    std::byte* destination;  // where a read's payload lands; null for other requests
    std::uint64_t length;
  };

  std::optional<Pending> take(std::uint64_t request_id);
  void chunk_done(TcpConnection& connection, const std::shared_ptr<TcpTransfer>& transfer);

  std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Pending> pending_;
  bool closed_ = false;
};

// Sends the completion notice of `transfer` (all chunks moved) and expects its answer.
void send_completion_notice(const std::shared_ptr<TcpTransfer>& transfer);

}  // namespace memwire::detail
