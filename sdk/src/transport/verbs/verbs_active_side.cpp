// The active side of the verbs protocol: Begin, then RDMA READ/WRITE batches once the owner
// accepted, then Done; the owner's Result ends the transfer. Abort is the error notice.
#include <algorithm>

#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail::verbs {
namespace {

// Work requests per post; only the last one of a batch is signalled.
constexpr unsigned kBatch = 16;

}  // namespace

Notice Engine::begin_notice(const OutboundTransfer& outbound) const {
  Notice notice;
  notice.type = NoticeType::Begin;
  notice.seq = outbound.seq;
  notice.key = outbound.transfer->key();
  notice.token = outbound.transfer->token();
  notice.kind = outbound.transfer->kind();
  return notice;
}

void Engine::begin(const std::shared_ptr<ActiveTransfer>& transfer, const TransportOffer& offer,
                   std::uint64_t seq) {
  if (is_terminal(transfer->status())) return;
  const auto& local = transfer->local();
  const auto& remote = transfer->remote().descriptors();
  if (local.size() != remote.size() || offer.keys.size() != local.size()) {
    transfer->fail(Error(ErrorCode::InvalidMetadata,
                         "verbs offer has " + std::to_string(offer.keys.size()) + " keys for " +
                             std::to_string(remote.size()) + " remote and " +
                             std::to_string(local.size()) + " local descriptors"));
    return;
  }
  OutboundTransfer outbound;
  outbound.seq = seq;
  outbound.transfer = transfer;
  for (std::size_t i = 0; i < local.size(); ++i) {
    if (local[i].size() != remote[i].size) {
      transfer->fail(
          Error(ErrorCode::SizeMismatch, "descriptor " + std::to_string(i) + " differs in size"));
      return;
    }
    if (offer.keys[i] > UINT32_MAX) {
      transfer->fail(Error(ErrorCode::InvalidMetadata,
                           "verbs key " + std::to_string(offer.keys[i]) + " is not an rkey"));
      return;
    }
    outbound.rkeys.push_back(static_cast<std::uint32_t>(offer.keys[i]));
  }
  std::shared_ptr<Connection> connection;
  try {
    connection = connection_to(transfer->remote().endpoint().connector, offer.address);
  } catch (const Error& error) {
    transfer->fail(error);
    return;
  }
  auto& entry = connection->outbound.emplace(seq, std::move(outbound)).first->second;
  transfers_[seq] = connection.get();
  if (connection->state == Connection::State::Established) {
    entry.begun = true;
    if (!connection->send(begin_notice(entry)))
      fail_connection(*connection, Error(ErrorCode::Transport, "verbs: cannot post to the QP of " +
                                                                   describe(*connection)));
  }
}

void Engine::on_accept(Connection& connection, const Notice& notice) {
  auto found = connection.outbound.find(notice.seq);
  if (found == connection.outbound.end()) return;  // aborted meanwhile
  auto& outbound = found->second;
  if (notice.error) {
    auto transfer = outbound.transfer;
    transfers_.erase(notice.seq);
    connection.outbound.erase(found);
    transfer->fail(Error(*notice.error, "the owner refused the transfer: " + notice.text));
    return;
  }
  if (outbound.aborted || is_terminal(outbound.transfer->status())) return;
  auto pin = outbound.transfer->gate().pin();
  if (!pin) return;  // being cancelled: its failure notifier (abort) comes next
  // A device that still holds the buffers after the grace period is cut off: the QP goes.
  outbound.transfer->gate().add_breaker(
      reinterpret_cast<std::uintptr_t>(&outbound), [weak = weak_from_this(), seq = notice.seq] {
        if (auto engine = weak.lock())
          engine->run_on_loop([raw = engine.get(), seq] { raw->break_transfer(seq); });
      });
  const int access = outbound.transfer->kind() == OperationKind::Read ? IBV_ACCESS_LOCAL_WRITE : 0;
  try {
    for (const auto& descriptor : outbound.transfer->local())
      outbound.regions.push_back(
          local_regions_.acquire(descriptor.ptr(), descriptor.size(), access));
  } catch (const Error& error) {
    outbound.regions.clear();
    pin.reset();
    outbound.transfer->fail(error);  // its abort tells the owner
    return;
  }
  outbound.pin = std::move(pin);
  connection.ready.push_back(notice.seq);
  pump(connection);
}

void Engine::pump(Connection& connection) {
  ibv_send_wr requests[kBatch];
  ibv_sge elements[kBatch];
  while (connection.state == Connection::State::Established && !connection.ready.empty()) {
    const auto credits = std::min(connection.data_credits(), kBatch);
    if (credits == 0) return;  // resumes when a batch completes
    const auto seq = connection.ready.front();
    connection.ready.pop_front();
    auto found = connection.outbound.find(seq);
    if (found == connection.outbound.end()) continue;
    auto& outbound = found->second;
    if (outbound.aborted || is_terminal(outbound.transfer->status())) {
      if (outbound.batches_in_flight == 0) outbound.release_buffers();
      continue;
    }
    const auto count = outbound.next_batch({requests, credits}, {elements, credits}, chunk_bytes_,
                                           Connection::wr_id(Connection::Tag::Data, seq));
    if (count == 0) continue;
    if (!connection.post_data(requests, count)) {
      fail_connection(connection, Error(ErrorCode::Transport,
                                        "verbs: cannot post RDMA to " + describe(connection)));
      return;
    }
    ++outbound.batches_in_flight;
    // Round robin: transfers sharing the QP take turns batch by batch.
    if (!outbound.all_posted()) connection.ready.push_back(seq);
  }
}

void Engine::on_batch_done(Connection& connection, std::uint64_t seq) {
  auto found = connection.outbound.find(seq);
  if (found != connection.outbound.end()) {
    auto& outbound = found->second;
    --outbound.batches_in_flight;
    if (outbound.aborted || is_terminal(outbound.transfer->status())) {
      if (outbound.batches_in_flight == 0) {
        outbound.release_buffers();
        if (outbound.aborted) {
          transfers_.erase(seq);
          connection.outbound.erase(found);
        }
      }
    } else if (outbound.all_posted() && outbound.batches_in_flight == 0 && !outbound.done_sent) {
      // Every byte is in place: let go of the buffers, then ask the owner to complete.
      outbound.release_buffers();
      outbound.done_sent = true;
      Notice done;
      done.type = NoticeType::Done;
      done.seq = seq;
      done.key = outbound.transfer->key();
      done.token = outbound.transfer->token();
      done.kind = outbound.transfer->kind();
      if (!connection.send(done)) {
        fail_connection(connection, Error(ErrorCode::Transport, "verbs: cannot post to the QP of " +
                                                                    describe(connection)));
        return;
      }
    }
  }
  pump(connection);
}

void Engine::on_result(Connection& connection, const Notice& notice) {
  auto found = connection.outbound.find(notice.seq);
  if (found == connection.outbound.end()) return;
  auto transfer = found->second.transfer;
  transfers_.erase(notice.seq);
  connection.outbound.erase(found);
  if (!notice.error)
    transfer->succeed();
  else
    transfer->fail(Error(*notice.error, "the owner did not complete the transfer: " + notice.text));
}

void Engine::abort(std::uint64_t seq, const Error& error) {
  auto where = transfers_.find(seq);
  if (where == transfers_.end()) return;
  Connection& connection = *where->second;
  auto found = connection.outbound.find(seq);
  if (found == connection.outbound.end()) {
    transfers_.erase(where);
    return;
  }
  auto& outbound = found->second;
  outbound.aborted = true;
  bool sent = true;
  if (outbound.begun) {
    Notice notice;
    notice.type = NoticeType::Abort;
    notice.seq = seq;
    notice.key = outbound.transfer->key();
    notice.token = outbound.transfer->token();
    notice.kind = outbound.transfer->kind();
    notice.error = error.code();
    notice.text = error.what();
    sent = connection.send(notice);
  }
  // Work requests still in flight keep the entry (and the buffers' regions) until they end.
  if (outbound.batches_in_flight == 0) {
    outbound.release_buffers();
    transfers_.erase(where);
    connection.outbound.erase(found);
  }
  if (!sent)
    fail_connection(connection, Error(ErrorCode::Transport,
                                      "verbs: cannot post to the QP of " + describe(connection)));
}

void Engine::break_transfer(std::uint64_t seq) {
  auto where = transfers_.find(seq);
  if (where == transfers_.end()) return;
  fail_connection(*where->second, Error(ErrorCode::PeerLost,
                                        "verbs: a cancelled transfer's RDMA did not finish "
                                        "within the grace period; connection to " +
                                            describe(*where->second) + " reset"));
}

}  // namespace memwire::detail::verbs
