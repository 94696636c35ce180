#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/registration_table.hpp"
#include "cuda/ipc_mappings.hpp"
#include "owner/admitted_transfers.hpp"
#include "owner/pool_request.hpp"
#include "transport/stream/accepted_connections.hpp"
#include "transport/stream/cuda_ipc_pieces.hpp"
#include "transport/stream/same_host.hpp"
#include "transport/stream/stream_connection.hpp"

namespace memwire::detail {

class Registration;
class CudaDriver;
class GpuPoolMemory;

// Serves one accepted connection: checks every request against the live registration before
// touching memory, answers errors as frames, and fails the registrations it touched when the
// active side's connection dies.
class StreamPassiveSide final : public FrameHandler {
 public:
  // `peer_process`: the active side's pid when the kernel vouches for it (Unix sockets); 0 on
  // TCP. `transport` names us in operation status. `transfers`: what its tagged pool transfers
  // count against. `same_host`: shm's part, which serves cross-memory requests; null refuses
  // them (tcp, or a peer of unknown process).
  StreamPassiveSide(std::shared_ptr<RegistrationTable> registrations, int peer_process,
                    std::string transport, std::unique_ptr<TransferBudget::Account> transfers,
                    std::unique_ptr<SameHostOwner> same_host = nullptr)
      : registrations_(std::move(registrations)),
        peer_process_(peer_process),
        transport_(std::move(transport)),
        transfers_(std::move(transfers)),
        same_host_(std::move(same_host)) {}

  // The connection this handler serves, for the breakers it installs on registrations.
  void bind(std::weak_ptr<StreamConnection> connection) { connection_ = std::move(connection); }
  // Where the standing its admitted requests earn the connection is kept (and limited).
  void stand_in(std::shared_ptr<AcceptedConnections> accepted) { accepted_ = std::move(accepted); }

  void on_frame(StreamConnection& connection, const FrameHeader& header) override;
  void on_malformed(const FrameHeader& header) override { count_fault(header); }
  void on_closed(StreamConnection& connection, const Error& reason) override;
  // A registration this connection touched is still in progress.
  bool busy() const override;

 private:
  std::shared_ptr<Registration> find(const FrameHeader& header) const;
  // A tagged pool request admitted (admit_pool_request; under `grant`, null for other tokens),
  // before any byte moves: opens (or continues) its transfer on this connection, with the peer
  // its token says it is. Throws as the refusal to answer with.
  void open_tagged_transfer(const StreamConnection& connection, const PoolFrameHeader& header,
                            const std::shared_ptr<Registration>& registration,
                            const std::string& tag, const std::shared_ptr<RequestGrant>& grant);
  // The pieces of a request as the owner's floor names them.
  static std::vector<BlockPiece> block_pieces(std::span<const FramePiece> pieces);
  // A request under `grant`, pinned by its admission, lands now: its release breaks this
  // connection if the pin outlives the grace.
  AccessGate::Pin pin_grant(const std::shared_ptr<RequestGrant>& grant, AccessGate::Pin pin);
  // The transfer's last step (PoolEnd): delivers its tag, or tells its waiters it failed.
  void serve_pool_end(StreamConnection& connection, const FrameHeader& header);
  // Ends open transfer `id`: delivers its tag unless `failure` (or a refused request of it),
  // else fails its waits. Returns why the tag was not delivered.
  std::optional<Error> end_transfer(std::uint64_t id, std::optional<Error> failure);
  // Counts a frame against the protocol against the pool it names (Pool::peer_faults()), if it
  // names one.
  void count_fault(const FrameHeader& header) const;
  // A frame the protocol forbids: counted against the pool it names, answered, and the
  // connection closed.
  void fault(StreamConnection& connection, const FrameHeader& header, FrameType answer_type,
             const std::string& what);
  void serve_read(StreamConnection& connection, const FrameHeader& header);
  void serve_write(StreamConnection& connection, const FrameHeader& header);
  void serve_notice(StreamConnection& connection, const FrameHeader& header);
  // A read or write of many blocks in one request: every piece is checked before any is touched.
  void serve_pieces(StreamConnection& connection, const FrameHeader& header);
  // A checked piece request of a pool in GPU memory, or one through CUDA IPC (in
  // stream_passive_gpu.cpp): bytes on the socket or in a peer's host memory pass through a
  // pinned bounce buffer; a peer's GPU memory is opened and copied device to device, after the
  // pieces were checked against what the driver says of it. `unread` is set to 0 once the
  // payload on the socket is taken care of. `grant_pin` (under a request grant) is let go with
  // the pool's pin. Throws as the refusal to answer with.
  void serve_gpu_pieces(StreamConnection& connection, const FrameHeader& header,
                        const std::shared_ptr<Registration>& registration,
                        std::span<const FramePiece> pieces,
                        std::span<const FrameIpcAllocation> table, std::vector<iovec> memory,
                        std::uint64_t& unread, std::optional<AccessGate::Pin> grant_pin);
  // The peer's allocation a table entry names, opened here once per connection.
  OpenedAllocation open_peer_allocation(const CudaDriver& driver, int ordinal,
                                        const FrameIpcAllocation& entry);
  // The peer's side of a cross-memory piece request, as the kernel's copy takes it.
  static std::vector<iovec> peer_ranges(std::span<const FramePiece> pieces);
  // Copies a checked cross-memory piece request's bytes (same_host_); throws when the kernel
  // refuses.
  void copy_pieces(const FrameHeader& header, std::span<const FramePiece> pieces,
                   std::vector<iovec>& memory, OutFrame& response);
  static OutFrame write_response(const FrameHeader& request);
  // Skips `unread` payload bytes of a refused request, then answers with `error`.
  static void refuse_after(StreamConnection& connection, std::uint64_t unread, FrameType type,
                           const FrameHeader& request, const Error& error);
  // Answers a malformed frame (its framing cannot be trusted) and closes the connection.
  static void refuse_malformed(StreamConnection& connection, FrameType type,
                               const FrameHeader& request, const std::string& what);
  void serve_hello(StreamConnection& connection, const FrameHeader& header);
  // Sends the answer to a served request; completes the operation first when it asked to.
  void finish_request(StreamConnection& connection, const FrameHeader& request,
                      const std::shared_ptr<Registration>& registration, OutFrame response);
  // Who sent a tag: the connector its Hello named, else the connection's address.
  std::string peer_name(const StreamConnection& connection) const;
  // The part that serves cross-memory requests; throws unless they are allowed with this peer.
  SameHostOwner& same_host() const;
  void touch(const std::shared_ptr<Registration>& registration);
  // A request of this connection was admitted under a token that gives it `standing`: throws
  // Error{Transport} naming the connection limit that refuses it, before anything moves.
  void stand(const StreamConnection& connection, Standing standing) {
    if (standing <= standing_) return;  // the usual case: one compare per request
    rise(connection, standing);
  }
  void rise(const StreamConnection& connection, Standing standing);
  static void answer(StreamConnection& connection, FrameType type, const FrameHeader& request,
                     const Error* error);

  const std::shared_ptr<RegistrationTable> registrations_;
  const int peer_process_;
  const std::string transport_;
  std::weak_ptr<StreamConnection> connection_;
  // Registrations this connection accessed and that have not completed yet.
  std::map<Id128, std::weak_ptr<Registration>> touched_;
  // Pools this connection accessed (they never complete), and its tagged pool transfers.
  std::map<Id128, std::weak_ptr<Registration>> pools_touched_;
  AdmittedTransfers transfers_;
  // Request grants this connection landed bytes under: their release may break it.
  std::map<Id128, std::weak_ptr<RequestGrant>> grants_touched_;
  std::string peer_name_;  // what its Hello said
  std::shared_ptr<AcceptedConnections> accepted_;
  Standing standing_ = Standing::HelloOnly;
  // This connection's number, never reused: what a shared-token peer's share of a pool's queue
  // is kept by (PoolState::Peer::connection), whatever its Hello said.
  const std::uint64_t serial_ = next_serial();
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> next{1};
    return next.fetch_add(1);
  }
  IpcMappings ipc_mappings_;  // the peer's GPU allocations opened for this connection
  const std::unique_ptr<SameHostOwner> same_host_;
  // The Hello asked for cross-memory copies and check_hello accepted its sender: the one thing
  // that lets same_host() answer (loop thread).
  bool sender_checked_ = false;
};

}  // namespace memwire::detail
