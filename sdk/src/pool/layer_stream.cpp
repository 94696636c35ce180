#include "memwire/layer_stream.hpp"

#include <algorithm>

#include "core/registration.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"

namespace memwire {
namespace {

// Cancels a layer's transfer unless it ended: a failed one throws, and has nothing in flight.
void cancel_layer(BlockTransfer& transfer, const std::string& reason) {
  try {
    transfer.cancel(reason);
  } catch (const Error&) {
    // It had failed already.
  }
}

Error stream_cancelled(const std::string& stream, const std::string& reason) {
  return Error(ErrorCode::Cancelled, "stream " + stream + " was cancelled: " + reason);
}

}  // namespace

// Written by a layer's completion callback (the I/O thread), read by send() and cancelled().
struct LayerSender::Abort {
  mutable std::mutex mutex;
  std::string reason;  // why the first cancelled layer failed
  std::string get() const {
    std::lock_guard lock(mutex);
    return reason;
  }
};

std::string layer_tag(std::string_view stream, std::uint32_t layer) {
  return std::string(stream) + "/" + std::to_string(layer);
}

LayerSender::LayerSender(Connector& connector, const Pool& local, PoolMetadata remote,
                         std::string stream)
    : abort_(std::make_shared<Abort>()),
      connector_(connector),
      local_(local),
      remote_(std::move(remote)),
      stream_(std::move(stream)) {
  // Checked now, not at the first layer: the longest tag must fit.
  if (layer_tag(stream_, UINT32_MAX).size() > Connector::kMaxTagBytes)
    throw Error(ErrorCode::InvalidArgument, "stream id too long for a tag");
}

void LayerSender::refuse_if_cancelled() const {
  {
    std::lock_guard lock(mutex_);
    if (!cancelled_.empty()) throw stream_cancelled(stream_, cancelled_);
  }
  if (auto aborted = abort_->get(); !aborted.empty())
    throw Error(ErrorCode::Cancelled,
                "stream " + stream_ + " was ended by its receiver: " + aborted);
}

bool LayerSender::cancelled() const {
  {
    std::lock_guard lock(mutex_);
    if (!cancelled_.empty()) return true;
  }
  return !abort_->get().empty();
}

void LayerSender::add(BlockTransfer transfer) {
  std::lock_guard lock(mutex_);
  if (!cancelled_.empty()) {
    cancel_layer(transfer, cancelled_);  // cancelled while it started: it ends as the others did
    throw stream_cancelled(stream_, cancelled_);
  }
  // A layer failing with Cancelled that this side did not cancel: the receiver ended the
  // stream (its grant released, the pool closed). Known at once, not at finish().
  transfer.on_complete(
      [abort = abort_, core = std::weak_ptr(transfer.core_)](OperationStatus status) {
        if (status == OperationStatus::Complete) return;
        const auto live = core.lock();
        const auto failure = live ? live->failure() : std::nullopt;
        if (!failure || failure->code() != ErrorCode::Cancelled) return;
        std::lock_guard lock(abort->mutex);
        if (abort->reason.empty()) abort->reason = std::string(failure->message());
      });
  transfers_.push_back(std::move(transfer));
}

BlockTransfer* LayerSender::layer(std::size_t index) {
  std::lock_guard lock(mutex_);
  if (!cancelled_.empty()) throw stream_cancelled(stream_, cancelled_);
  return index < transfers_.size() ? &transfers_[index] : nullptr;
}

std::size_t LayerSender::layers_sent() const {
  std::lock_guard lock(mutex_);
  return transfers_.size();
}

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks) {
  refuse_if_cancelled();
  add(connector_.write_blocks(local_, blocks, remote_, layer_tag(stream_, layer)));
}

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks,
                       const BlockSlice& slice) {
  refuse_if_cancelled();
  add(connector_.write_blocks(local_, blocks, remote_, slice, layer_tag(stream_, layer)));
}

void LayerSender::finish(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Unlocked while it waits, so that a cancel() from another thread ends the wait.
  for (std::size_t index = 0; auto* transfer = layer(index); ++index) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    transfer->wait_for_completion(std::max(left, std::chrono::milliseconds(0)));
  }
}

void LayerSender::cancel(std::string_view reason) {
  std::lock_guard lock(mutex_);
  if (!cancelled_.empty()) return;
  cancelled_ = reason.empty() ? std::string("cancelled by the sender") : std::string(reason);
  // Each unfinished layer's PoolEnd (PoolAbort on verbs) carries Cancelled and the reason.
  for (auto& transfer : transfers_) cancel_layer(transfer, cancelled_);
}

LayerReceiver::LayerReceiver(Pool& pool, std::string stream, std::string from, TagKinds kinds)
    : pool_(pool), stream_(std::move(stream)), from_(std::move(from)), kinds_(kinds) {}

LayerReceiver::LayerReceiver(Pool& pool, BlockGrant grant, std::string stream, TagKinds kinds)
    : pool_(pool),
      stream_(std::move(stream)),
      token_(grant.metadata().token()),
      kinds_(kinds),
      grant_(std::make_unique<BlockGrant>(std::move(grant))) {}

void LayerReceiver::wait(std::uint32_t layer, std::chrono::milliseconds timeout) {
  // A cancellation of any layer of the stream ends the wait for this one: one that passes the
  // same filter (a shared-token peer's never ends a granted stream's waits).
  (void)pool_.waitable().wait_for_tag(layer_tag(stream_, layer), timeout, {from_, token_, kinds_},
                                      stream_ + "/");
}

void LayerReceiver::cancel(std::string_view reason) {
  const auto why = reason.empty() ? std::string("cancelled by the receiver") : std::string(reason);
  if (grant_) grant_->close(why);
  // Every wait of the stream, on any thread, ends with it: a failure no layer has as its tag.
  // (A closed pool's waits ended already: nothing to tell them.)
  if (pool_.registration_ && is_terminal(pool_.registration_->status())) return;
  // It passes this receiver's own filter: its name, token and kind.
  const auto kind = kinds_ == TagKinds::Reads ? OperationKind::Read : OperationKind::Write;
  pool_.registration().pool()->fail(
      {grant_ ? grant_->peer() : from_, grant_ != nullptr,
       grant_ ? grant_->request() : std::string(), token_},
      stream_ + "/cancelled", Error(ErrorCode::Cancelled, "cancelled by the owner: " + why), kind);
}

const PoolMetadata& LayerReceiver::grant_metadata() const {
  if (!grant_) throw Error(ErrorCode::InvalidArgument, "this receiver holds no grant");
  return grant_->metadata();
}

}  // namespace memwire
