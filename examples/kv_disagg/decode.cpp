// The decode worker: owns the KV pool, admits requests on the scheduler's word (a grant per
// request, or the pool's shared metadata with --no-grants), receives their layers, aborts the
// one the scheduler marks, and at the end checks that every finished request's KV holds its own
// bytes and nobody else's.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "kv_disagg.hpp"
#include "memwire/memwire.hpp"
#include "workers.hpp"

namespace kv_disagg {
namespace {

struct Admitted {
  std::vector<std::uint64_t> ids;
  bool finished = false;  // all layers in; aborted requests never are
};

class Decode {
 public:
  explicit Decode(bool grants)
      : grants_(grants),
        connector_(memwire::ConnectorOptions::from_environment()),
        memory_(kPoolBlocks * kBlockBytes),
        pool_(connector_.register_pool({{memory_.data(), kBlockBytes, 0, kPoolBlocks, {}}},
                                       {.name = "kv"})) {}

  ~Decode() {
    for (auto& stream : streams_) stream.join();
  }

  std::string transports() const {
    std::string out;
    for (const auto& name : connector_.transports()) out += (out.empty() ? "" : ",") + name;
    return out;
  }

  // Opens the request's stream and answers with the metadata prefill writes it with.
  void admit(const std::string& request, const std::vector<std::uint64_t>& ids,
             std::int64_t abort_after, const std::string& prefill_peer) {
    const auto admitted_at = Clock::now();
    std::unique_ptr<memwire::LayerReceiver> receiver;
    std::string metadata;
    if (grants_) {
      std::vector<std::uint64_t> blocks;
      for (std::uint32_t layer = 0; layer < kLayers; ++layer)
        for (unsigned kv = 0; kv < 2; ++kv)
          for (auto id : ids) blocks.push_back(block_index(layer, kv, id));
      std::sort(blocks.begin(), blocks.end());
      auto grant = pool_.grant(prefill_peer, request, blocks, memwire::Access::Write, kLease);
      receiver = std::make_unique<memwire::LayerReceiver>(pool_, std::move(grant), request);
      metadata = receiver->grant_metadata().to_json();
    } else {
      // Any holder of this metadata may write any block, now and after the request ends.
      receiver = std::make_unique<memwire::LayerReceiver>(pool_, request);
      metadata = pool_.metadata().to_json();
    }
    {
      std::lock_guard lock(mutex_);
      admitted_[request] = {ids, false};
    }
    say("admitted " + request + " " + metadata);
    streams_.emplace_back(
        [this, request, ids, abort_after, admitted_at, receiver = std::move(receiver)] {
          receive(*receiver, request, ids, abort_after, admitted_at);
        });
  }

  // Checks every finished request's KV, word by word; answers one line each and a summary.
  void verify() {
    std::lock_guard lock(mutex_);
    int corrupt = 0;
    for (const auto& [request, admitted] : admitted_) {
      if (!admitted.finished) continue;
      const auto wrong = check(request, admitted.ids, 0, kLayers);
      if (!wrong.empty()) ++corrupt;
      say_locked(wrong.empty() ? "intact " + request : "corrupt " + request + " " + wrong);
    }
    say_locked("verified " + std::to_string(corrupt));
  }

 private:
  void receive(memwire::LayerReceiver& receiver, const std::string& request,
               const std::vector<std::uint64_t>& ids, std::int64_t abort_after,
               Clock::time_point admitted_at) {
    try {
      double first_layer_ms = 0;
      for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
        receiver.wait(layer, 10s);
        if (layer == 0) first_layer_ms = ms_since(admitted_at);
        std::string wrong;
        {
          std::lock_guard lock(mutex_);  // check() names writers from admitted_
          wrong = check(request, ids, layer, layer + 1);
        }
        if (!wrong.empty()) return say("corrupt " + request + " " + wrong);
        if (std::int64_t(layer) == abort_after) {
          // The client went away: end the request and give its blocks back at once.
          const auto abort_start = Clock::now();
          receiver.cancel("client disconnected");
          return say("aborted " + request + " " + std::to_string(layer) + " " +
                     std::to_string(ms_since(abort_start)));
        }
      }
      const auto end_to_end_ms = ms_since(admitted_at);
      {
        std::lock_guard lock(mutex_);
        admitted_[request].finished = true;
      }
      say("received " + request + " " + std::to_string(first_layer_ms) + " " +
          std::to_string(end_to_end_ms));
    } catch (const std::exception& error) {
      say("failed " + request + " " + error.what());
    }
  }

  // Empty when layers [first, last) of the request hold its words only; else what is wrong,
  // naming the request whose bytes are there when it is one we admitted.
  std::string check(const std::string& request, const std::vector<std::uint64_t>& ids,
                    std::uint32_t first, std::uint32_t last) {
    std::map<std::string, std::uint64_t> strays;  // writer (or "unknown") -> blocks
    std::uint32_t first_bad = last, last_bad = 0;
    for (std::uint32_t layer = first; layer < last; ++layer) {
      const auto expected = kv_word(request, layer);
      for (unsigned kv = 0; kv < 2; ++kv)
        for (auto id : ids) {
          const auto* words =
              static_cast<const std::uint64_t*>(pool_.block(block_index(layer, kv, id)));
          for (std::uint64_t w = 0; w < kBlockBytes / 8; ++w) {
            if (words[w] == expected) continue;
            ++strays[writer_of(words[w], layer)];
            first_bad = std::min(first_bad, layer);
            last_bad = std::max(last_bad, layer);
            break;  // one stray word condemns the block
          }
        }
    }
    if (strays.empty()) return {};
    std::string out = "layers " + std::to_string(first_bad) + "-" + std::to_string(last_bad) + ":";
    for (const auto& [writer, blocks] : strays)
      out += " " + std::to_string(blocks) + " blocks hold " + writer + "'s bytes";
    return out;
  }

  std::string writer_of(std::uint64_t word, std::uint32_t layer) {
    for (const auto& [other, unused] : admitted_)
      if (word == kv_word(other, layer)) return other;
    return "nobody";
  }

  void say(const std::string& line) {
    std::lock_guard lock(mutex_);
    say_locked(line);
  }
  void say_locked(const std::string& line) { std::cout << line << std::endl; }

  const bool grants_;
  memwire::Connector connector_;
  std::vector<std::uint8_t> memory_;
  memwire::Pool pool_;
  std::mutex mutex_;  // admitted_ and stdout
  std::map<std::string, Admitted> admitted_;
  std::vector<std::thread> streams_;
};

}  // namespace

int run_decode(bool grants) {
  Decode decode(grants);
  std::cout << "ready " << decode.transports() << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "admit") {
      std::string request, ids, peer;
      std::int64_t abort_after = -1;
      in >> request >> ids >> abort_after >> peer;
      decode.admit(request, split_ids(ids), abort_after, peer);
    } else if (command == "verify") {
      decode.verify();
    } else if (command == "quit") {
      break;
    }
  }
  return 0;
}

}  // namespace kv_disagg
