#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/block_grant.hpp"
#include "memwire/connector.hpp"
#include "memwire/export.hpp"
#include "memwire/pool.hpp"

namespace memwire {

// Layer-wise streaming of a KV cache between a prefill and a decode worker, on pools: prefill
// writes layer i's blocks into decode's pool as soon as layer i is computed, tagged with the
// stream and the layer; decode waits for layer i's tag before it computes layer i. Transfers
// overlap prefill's compute, and decode starts on layer 0 while later layers are in flight.
//
//   prefill:  LayerSender send(connector, kv_pool, decode_pool_metadata, "req-17");
//             for each layer i: compute(i); send.send(i, blocks_of(i));
//             send.finish(10s);
//   decode:   LayerReceiver receive(kv_pool, "req-17");
//             for each layer i: receive.wait(i, 10s); compute(i);
//
// A tag reaches decode only after its layer's bytes are in decode's memory, on every transport.
// Streams of different requests into one pool are told apart by their id.
//
// Ending a request early (work in flight: cancel, on either side): prefill's cancel(reason)
// ends decode's waits of the stream with Error{Cancelled} and the reason; decode's
// cancel(reason) closes the request's grant, so that prefill's transfers of it fail at once
// with Error{Cancelled} ("blocks released by the owner for request X: reason") and no late
// byte lands in blocks decode reuses.

// The tag of `layer` of stream `stream`: "<stream>/<layer>".
MEMWIRE_API std::string layer_tag(std::string_view stream, std::uint32_t layer);

class MEMWIRE_API LayerSender {
 public:
  LayerSender(Connector& connector, const Pool& local, PoolMetadata remote, std::string stream);
  LayerSender(const LayerSender&) = delete;
  LayerSender& operator=(const LayerSender&) = delete;
  // Drops unfinished layers: their transfers are cancelled (decode's waits for them fail).
  ~LayerSender() = default;

  // Begins writing `blocks` (remote <- local pairs) of `layer`; returns at once. Throws
  // Error{Cancelled} with the reason once the stream ended: cancel() here, or the receiver's
  // abort (its grant closed), learnt from the first layer it refused (cancelled()).
  void send(std::uint32_t layer, const std::vector<BlockPair>& blocks);
  // The same, moving only `slice` of each pair's blocks (a prefill rank's share of decode's
  // blocks when the two run different tensor parallelism; see BlockSlice).
  void send(std::uint32_t layer, const std::vector<BlockPair>& blocks, const BlockSlice& slice);
  // Waits until every layer sent so far is in decode's pool; throws the first failure, or
  // Error{Timeout}, or Error{Cancelled} after cancel().
  void finish(std::chrono::milliseconds timeout);
  std::size_t layers_sent() const;
  // True once the stream ended: cancel() was called, or a layer's transfer failed with
  // Cancelled (decode's LayerReceiver::cancel closed the grant, or the owner closed it or the
  // pool), as soon as that failure arrives. For an engine to poll between layers: stop
  // computing a request nobody waits for.
  bool cancelled() const;
  // Ends the stream: the layers in flight are cancelled, and decode's waits for them (and, on
  // tcp and shm, for every layer of the stream) end with Error{Cancelled} carrying `reason`,
  // as does a finish() in flight on another thread; later send()s and finish()es throw it.
  // Idempotent; safe beside a send() on another thread.
  void cancel(std::string_view reason = {});

 private:
  struct Abort;  // the receiver's side ending the stream, as a layer's failure says
  void refuse_if_cancelled() const;
  void add(BlockTransfer transfer);
  BlockTransfer* layer(std::size_t index);  // null past the last
  mutable std::mutex mutex_;
  std::string cancelled_;         // the reason, once cancelled
  std::shared_ptr<Abort> abort_;  // shared with the layers' callbacks
  Connector& connector_;
  const Pool& local_;
  const PoolMetadata remote_;
  const std::string stream_;
  std::deque<BlockTransfer> transfers_;  // a deque: a waiter's element stays put on a send()
};

// A layer arrives with a tagged write (`kinds`: reads too, or instead, when asked for).
class MEMWIRE_API LayerReceiver {
 public:
  // `from`: the sending connector's name, when known: only its tags and its loss count. Under
  // the pool's shared token that name is a label any holder may claim: prefer a grant.
  LayerReceiver(Pool& pool, std::string stream, std::string from = {},
                TagKinds kinds = TagKinds::Writes);
  // The request's blocks granted to the sender (Pool::grant): hand grant_metadata() to it; only
  // transfers under the grant's token count (whatever name their peer gives itself), and
  // cancel() (or dropping the receiver) closes the grant.
  LayerReceiver(Pool& pool, BlockGrant grant, std::string stream,
                TagKinds kinds = TagKinds::Writes);
  // Returns once `layer` is in the pool. Throws Error{Timeout}, Error{PeerLost} (the sender
  // was lost, or its transfer of that layer failed), Error{Cancelled} (the sender cancelled the
  // stream, cancel() was called, or the pool was closed).
  void wait(std::uint32_t layer, std::chrono::milliseconds timeout);
  // Ends the request on the owner's side: its grant is closed (the sender's transfers of it
  // fail at once), and every wait of this stream, on any thread, ends with Error{Cancelled} and
  // `reason`. Idempotent.
  void cancel(std::string_view reason = {});
  // What the sender uses: the grant's metadata (throws InvalidArgument without a grant).
  const PoolMetadata& grant_metadata() const;

 private:
  Pool& pool_;
  const std::string stream_;
  const std::string from_;
  const std::string token_;  // the grant's: the only one whose transfers count
  const TagKinds kinds_;
  std::unique_ptr<BlockGrant> grant_;
};

}  // namespace memwire
