// The prefill worker: for each request the scheduler hands it, computes the layers (a sleep
// stands in for the GPU) and streams each one into decode's blocks as soon as it is done, with
// the metadata decode gave for the request. A request marked to stall stops after a layer
// until the prefill of a later request has finished, then writes its remaining layers: the
// late writer of an aborted request, made deterministic.
#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "kv_disagg.hpp"
#include "memwire/memwire.hpp"
#include "workers.hpp"

namespace kv_disagg {
namespace {

class Prefill {
 public:
  Prefill()
      : connector_(memwire::ConnectorOptions::from_environment()),
        memory_(kPoolBlocks * kBlockBytes),
        pool_(connector_.register_pool({{memory_.data(), kBlockBytes, 0, kPoolBlocks, {}}},
                                       {.name = "prefill-kv"})) {}

  ~Prefill() {
    for (auto& stream : streams_) stream.join();
  }

  const std::string& name() const { return connector_.name(); }

  void start(const std::string& request, const std::vector<std::uint64_t>& remote_ids,
             std::int64_t stall_after, const std::string& metadata) {
    // Its own blocks: the next free ids of prefill's pool, one request after another.
    std::vector<std::uint64_t> local_ids;
    for (std::uint64_t i = 0; i < remote_ids.size(); ++i)
      local_ids.push_back((started_ * kRequestBlocks + i) % kSlots);
    streams_.emplace_back([this, request, remote_ids, local_ids, stall_after,
                           remote = memwire::PoolMetadata::from_json(metadata),
                           order = started_++] {
      stream(request, remote_ids, local_ids, stall_after, remote, order);
    });
  }

 private:
  void stream(const std::string& request, const std::vector<std::uint64_t>& remote_ids,
              const std::vector<std::uint64_t>& local_ids, std::int64_t stall_after,
              const memwire::PoolMetadata& remote, std::uint64_t order) {
    const auto start = Clock::now();
    std::uint32_t late_layers = 0;  // written after the stall
    try {
      memwire::LayerSender send(connector_, pool_, remote, request);
      for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
        std::this_thread::sleep_for(kComputePerLayer);  // the layer's compute...
        std::vector<memwire::BlockPair> pairs;
        for (unsigned kv = 0; kv < 2; ++kv)
          for (std::size_t i = 0; i < remote_ids.size(); ++i) {
            const auto local = block_index(layer, kv, local_ids[i]);
            auto* words = static_cast<std::uint64_t*>(pool_.block(local));
            std::fill(words, words + kBlockBytes / 8, kv_word(request, layer));  // ...its K, V
            pairs.push_back({block_index(layer, kv, remote_ids[i]), local});
          }
        send.send(layer, pairs);  // on its way while the next layer computes
        if (stall_after < 0 || std::int64_t(layer) < stall_after) continue;
        if (std::int64_t(layer) == stall_after)
          wait_for_a_later_request(order);
        else
          ++late_layers;
      }
      send.finish(10s);
      say("prefilled " + request + " " + std::to_string(ms_since(start)) + " " +
          std::to_string(late_layers) + " ok");
    } catch (const std::exception& error) {
      say("prefilled " + request + " " + std::to_string(ms_since(start)) + " " +
          std::to_string(late_layers) + " refused " + error.what());
    }
    std::lock_guard lock(mutex_);
    finished_.push_back(order);
    finished_changed_.notify_all();
  }

  // The stall: this stream's GPU was taken by others, and it resumes only once a request that
  // came after it has been prefilled (by then decode has aborted it and reused its blocks).
  void wait_for_a_later_request(std::uint64_t order) {
    std::unique_lock lock(mutex_);
    finished_changed_.wait(lock, [&] {
      return std::any_of(finished_.begin(), finished_.end(),
                         [&](std::uint64_t other) { return other > order; });
    });
  }

  void say(const std::string& line) {
    std::lock_guard lock(mutex_);
    std::cout << line << std::endl;
  }

  memwire::Connector connector_;
  std::vector<std::uint8_t> memory_;
  memwire::Pool pool_;
  std::uint64_t started_ = 0;  // requests so far; touched by the command loop only
  std::mutex mutex_;           // finished_ and stdout
  std::condition_variable finished_changed_;
  std::vector<std::uint64_t> finished_;  // the order numbers of the streams that ended
  std::vector<std::thread> streams_;
};

}  // namespace

int run_prefill() {
  Prefill prefill;
  std::cout << "ready " << prefill.name() << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "prefill") {
      std::string request, ids, metadata;
      std::int64_t stall_after = -1;
      in >> request >> ids >> stall_after >> std::ws;
      std::getline(in, metadata);
      prefill.start(request, split_ids(ids), stall_after, metadata);
    } else if (command == "quit") {
      break;
    }
  }
  return 0;
}

}  // namespace kv_disagg
