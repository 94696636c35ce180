#include "memwire/layer_stream.hpp"

#include <algorithm>

#include "core/registration.hpp"
#include "memwire/error.hpp"
#include "pool/pool_state.hpp"

namespace memwire {

std::string layer_tag(std::string_view stream, std::uint32_t layer) {
  return std::string(stream) + "/" + std::to_string(layer);
}

LayerSender::LayerSender(Connector& connector, const Pool& local, PoolMetadata remote,
                         std::string stream)
    : connector_(connector), local_(local), remote_(std::move(remote)), stream_(std::move(stream)) {
  // Checked now, not at the first layer: the longest tag must fit.
  if (layer_tag(stream_, UINT32_MAX).size() > Connector::kMaxTagBytes)
    throw Error(ErrorCode::InvalidArgument, "stream id too long for a tag");
}

void LayerSender::refuse_if_cancelled() const {
  if (!cancelled_.empty())
    throw Error(ErrorCode::Cancelled, "stream " + stream_ + " was cancelled: " + cancelled_);
}

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks) {
  refuse_if_cancelled();
  transfers_.push_back(connector_.write_blocks(local_, blocks, remote_, layer_tag(stream_, layer)));
}

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks,
                       const BlockSlice& slice) {
  refuse_if_cancelled();
  transfers_.push_back(
      connector_.write_blocks(local_, blocks, remote_, slice, layer_tag(stream_, layer)));
}

void LayerSender::finish(std::chrono::milliseconds timeout) {
  refuse_if_cancelled();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& transfer : transfers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    transfer.wait_for_completion(std::max(left, std::chrono::milliseconds(0)));
  }
}

void LayerSender::cancel(std::string_view reason) {
  if (!cancelled_.empty()) return;
  cancelled_ = reason.empty() ? std::string("cancelled by the sender") : std::string(reason);
  // Each unfinished layer's PoolEnd (PoolAbort on verbs) carries Cancelled and the reason.
  for (auto& transfer : transfers_)
    if (!is_terminal(transfer.status())) transfer.cancel(cancelled_);
}

LayerReceiver::LayerReceiver(Pool& pool, std::string stream, std::string from)
    : pool_(pool), stream_(std::move(stream)), from_(std::move(from)) {}

LayerReceiver::LayerReceiver(Pool& pool, BlockGrant grant, std::string stream)
    : pool_(pool),
      stream_(std::move(stream)),
      from_(grant.peer()),
      grant_(std::make_unique<BlockGrant>(std::move(grant))) {}

void LayerReceiver::wait(std::uint32_t layer, std::chrono::milliseconds timeout) {
  // A cancellation of any layer of the stream ends the wait for this one.
  (void)pool_.registration().pool()->wait_for_tag(layer_tag(stream_, layer), timeout, from_,
                                                  stream_ + "/");
}

void LayerReceiver::abort(std::string_view reason) {
  const auto why = reason.empty() ? std::string("aborted by the receiver") : std::string(reason);
  if (grant_) grant_->release(why);
  // Every wait of the stream, on any thread, ends with it: a failure no layer has as its tag.
  auto& pool = *pool_.registration().pool();
  pool.fail({from_, grant_ != nullptr, grant_ ? grant_->request() : std::string()},
            stream_ + "/aborted", Error(ErrorCode::Cancelled, "aborted by the owner: " + why));
}

const PoolMetadata& LayerReceiver::grant_metadata() const {
  if (!grant_) throw Error(ErrorCode::InvalidArgument, "this receiver holds no grant");
  return grant_->metadata();
}

}  // namespace memwire
