#include "memwire/layer_stream.hpp"

#include <algorithm>

#include "memwire/error.hpp"

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

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks) {
  transfers_.push_back(connector_.write_blocks(local_, blocks, remote_, layer_tag(stream_, layer)));
}

void LayerSender::send(std::uint32_t layer, const std::vector<BlockPair>& blocks,
                       const BlockSlice& slice) {
  transfers_.push_back(
      connector_.write_blocks(local_, blocks, remote_, slice, layer_tag(stream_, layer)));
}

void LayerSender::finish(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& transfer : transfers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    transfer.wait_for_completion(std::max(left, std::chrono::milliseconds(0)));
  }
}

LayerReceiver::LayerReceiver(Pool& pool, std::string stream, std::string from)
    : pool_(pool), stream_(std::move(stream)), from_(std::move(from)) {}

void LayerReceiver::wait(std::uint32_t layer, std::chrono::milliseconds timeout) {
  (void)pool_.wait_for_tag(layer_tag(stream_, layer), timeout, from_);
}

}  // namespace memwire
