// Budgets no name can take (issue 44 item 3): a flood under the pool's shared token, over
// several connections with whatever Hello names (a granted peer's among them), tagged reads
// and tagged writes until refused, leaves a granted prefill's layers arriving on time. Its
// tags count against its connection's share and the shared token's; the rest of the queue is
// the granted peers', and the reads have a share of their own. The default budgets (scaled down
// over verbs and in sanitizer builds, budgets_for).
#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "sdk/transport/conformance/transport_conformance.hpp"
#include "support/sanitizers.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBlock = FilledBlocks::kBlock;
constexpr std::uint32_t kLayers = 8;         // one block each: blocks 0..7
constexpr std::uint64_t kFloodBlock = 8;     // what the flood reads and writes
constexpr std::size_t kInFlight = 64;        // per flooding connector
constexpr std::uint64_t kMostFlood = 24000;  // per flooding connector: past any share it has

// A connector with the shared token that sends tagged 1-byte reads and writes, never taken,
// kInFlight at once: until `stop`, or kMostFlood transfers.
class Flooder {
 public:
  Flooder(ConnectorOptions options, const PoolMetadata& target)
      : connector_(std::move(options)),
        memory_(16 * kBlock, std::byte{'f'}),
        local_(connector_.register_pool({{memory_.data(), kBlock, 0, 16, {}}})),
        target_(target),
        thread_([this] { run(); }) {}
  ~Flooder() {
    stop();
    thread_.join();
  }
  void stop() { stop_ = true; }
  // Until its writes were refused `refusals` times (or it sent all it may): its reads' share
  // fills first.
  void wait_refused(std::uint64_t refusals, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (writes_refused_ < refusals && !done_ && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
  }
  std::uint64_t delivered() const { return delivered_; }
  std::uint64_t refused() const { return refused_; }
  std::uint64_t writes_refused() const { return writes_refused_; }
  // Why its last write (or read) was refused.
  std::string last_refusal(bool write) const {
    std::lock_guard lock(mutex_);
    return write ? last_write_refusal_ : last_read_refusal_;
  }
  // The budgets (PoolOptions::...) its writes (or reads) were refused by, with how often.
  std::map<std::string, std::uint64_t> budgets_refusing(bool write) const {
    std::lock_guard lock(mutex_);
    return budgets_refusing_[write ? 1 : 0];
  }
  // Errors that named no budget (a timeout, a lost connection): never a refusal.
  std::uint64_t other_errors() const { return other_errors_; }
  std::string first_other_error() const {
    std::lock_guard lock(mutex_);
    return first_other_error_;
  }

 private:
  void run() {
    std::deque<std::pair<BlockTransfer, bool>> flight;  // (transfer, a write)
    const BlockSlice one_byte{.length = 1};
    for (std::uint64_t sent = 0; !stop_ && sent < kMostFlood; ++sent) {
      const auto tag = "req-17/" + std::to_string(1000 + sent);  // a stream's tags, even
      const bool write = sent % 2 == 1;
      try {
        flight.emplace_back(
            write ? connector_.write_blocks(local_, {{kFloodBlock, 1}}, target_, one_byte, tag)
                  : connector_.read_blocks(target_, {{kFloodBlock, 0}}, local_, one_byte, tag),
            write);
      } catch (const Error& error) {
        refuse(error.what(), write);  // refused at once (a transfer that finished as it began)
      }
      if (flight.size() >= kInFlight) {
        settle(flight.front().first, flight.front().second);
        flight.pop_front();
      }
    }
    for (auto& [transfer, write] : flight) settle(transfer, write);
    done_ = true;
  }
  void settle(BlockTransfer& transfer, bool write) {
    try {
      transfer.wait_for_completion(30s);
      ++delivered_;
    } catch (const Error& error) {
      refuse(error.what(), write);
    }
  }
  // A refusal names the budget that refused it: "... (PoolOptions::max_queued_shared): ...".
  void refuse(const std::string& why, bool write) {
    static const std::string kNamed = "(PoolOptions::";
    const auto named = why.find(kNamed);
    const auto end = named == std::string::npos ? named : why.find(')', named);
    std::lock_guard lock(mutex_);
    if (end == std::string::npos) {
      if (other_errors_++ == 0) first_other_error_ = why;
      return;
    }
    ++budgets_refusing_[write ? 1 : 0]
                       [why.substr(named + kNamed.size(), end - named - kNamed.size())];
    (write ? last_write_refusal_ : last_read_refusal_) = why;
    ++refused_;
    if (write) ++writes_refused_;
  }

  Connector connector_;
  std::vector<std::byte> memory_;
  Pool local_;
  const PoolMetadata target_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<std::uint64_t> delivered_{0}, refused_{0}, writes_refused_{0}, other_errors_{0};
  mutable std::mutex mutex_;
  std::string last_read_refusal_, last_write_refusal_, first_other_error_;
  std::map<std::string, std::uint64_t> budgets_refusing_[2];  // [0] reads, [1] writes
  std::thread thread_;
};

using QueueBudgets = PoolTransportConformance;

// The decode pool's options: the defaults, or over verbs and in sanitizer builds the same
// shares scaled down 64 times. Soft-RoCE in the TCG guest moves a tagged transfer in about a
// millisecond: flooding the default shares (16,384 of shared-token tags) would take it minutes;
// under ASan the flood took 36 s and held the layers past 5 s. Smaller shares prove the same
// rules: five connections' shares (5 x 64) still overrun the shared one (256).
PoolOptions budgets_for(std::string_view transport) {
  PoolOptions options;
  if (transport != "verbs" && !MEMWIRE_TEST_UNDER_SANITIZER) return options;
  options.max_queued_shared = 256;
  options.max_queued_per_connection = 64;
  options.max_queued_shared_reads = 64;
  return options;
}

// The budgets a shared-token flood may be refused by; the queue's own and a granted peer's
// (max_queued_notifications, max_queued_per_peer) are the granted peers' room.
const std::set<std::string> kSharedTokenBudgets = {"max_queued_per_connection", "max_queued_shared",
                                                   "max_queued_shared_reads"};

// Floods with connectors named `names` until each was refused, then streams kLayers layers
// from a prefill granted as prefill-A while the flood goes on; every layer must arrive whole.
// Returns the budgets the flood's writes were refused by (each flooder's, together).
std::set<std::string> flood_then_stream(const ConnectorOptions& base,
                                        const std::vector<std::string>& names,
                                        const PoolOptions& budgets) {
  auto named = [&](const std::string& name) {
    auto options = base;
    options.name = name;
    return options;
  };
  Connector decode(named("decode")), prefill(named("prefill-A"));
  FilledBlocks there(16, 0), here(16, 'p');
  auto pool = decode.register_pool(there.regions(), budgets);
  auto local = prefill.register_pool(here.regions());
  std::vector<std::unique_ptr<Flooder>> flood;
  const auto flood_began = std::chrono::steady_clock::now();
  for (const auto& name : names)
    flood.push_back(std::make_unique<Flooder>(named(name), pool.metadata()));
  for (auto& flooder : flood) flooder->wait_refused(kInFlight, 60s);
  const auto flooded = std::chrono::steady_clock::now() - flood_began;
  std::uint64_t delivered = 0, refused = 0;
  for (auto& flooder : flood) {
    delivered += flooder->delivered();
    refused += flooder->refused();
    EXPECT_GE(flooder->writes_refused(), kInFlight) << "the flood's writes were not refused";
  }
  std::vector<std::uint64_t> blocks(kLayers);
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) blocks[layer] = layer;
  LayerReceiver receive(pool, pool.grant("prefill-A", "req-17", blocks, Access::Write, 60s),
                        "req-17");
  LayerSender send(prefill, local, receive.grant_metadata(), "req-17");
  const auto began = std::chrono::steady_clock::now();
  std::uint32_t arrived = 0;
  std::string failure;
  std::chrono::steady_clock::duration first{};  // the first layer's: with the connection's setup
  for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
    try {
      send.send(layer, {{layer, layer}});
      receive.wait(layer, 5s);
      if (++arrived == 1) first = std::chrono::steady_clock::now() - began;
    } catch (const Error& error) {
      failure = error.what();
      break;
    }
  }
  const auto took = std::chrono::steady_clock::now() - began;
  for (auto& flooder : flood) flooder->stop();
  const auto ms = [](auto duration) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
  };
  std::printf(
      "flood of %zu connectors: %llu delivered, %llu refused in %lld ms (a read: %s; a write: "
      "%s); %u of %u layers arrived in %lld ms (the first in %lld ms)\n",
      names.size(), static_cast<unsigned long long>(delivered),
      static_cast<unsigned long long>(refused), static_cast<long long>(ms(flooded)),
      flood.back()->last_refusal(false).c_str(), flood.back()->last_refusal(true).c_str(), arrived,
      kLayers, static_cast<long long>(ms(took)), static_cast<long long>(ms(first)));
  EXPECT_EQ(arrived, kLayers) << failure;
  EXPECT_LT(took, 5s) << "the layers were late";
  for (std::uint32_t layer = 0; layer < arrived; ++layer)
    EXPECT_TRUE(there.block_is(layer, 'p')) << "layer " << layer;
  // Refused by a shared-token budget, each refusal: not failed some other way (counted as
  // refused, a timeout or a lost connection would hide a broken queue).
  std::set<std::string> writes_refused_by;
  for (auto& flooder : flood) {
    flooder->stop();
    EXPECT_EQ(flooder->other_errors(), 0u)
        << "flood transfers failed without naming a budget; first: "
        << flooder->first_other_error();
    for (const bool write : {false, true})
      for (const auto& [budget, count] : flooder->budgets_refusing(write)) {
        EXPECT_TRUE(kSharedTokenBudgets.contains(budget))
            << count << (write ? " writes" : " reads") << " refused by " << budget;
        if (write) writes_refused_by.insert(budget);
      }
    EXPECT_FALSE(flooder->budgets_refusing(true).contains("max_queued_shared_reads"))
        << "a write refused by the reads' share";
  }
  return writes_refused_by;
}

TEST_P(QueueBudgets, AFloodUnderManyHelloNamesLeavesAGrantedPrefillsLayersArriving) {
  const auto refused_by =
      flood_then_stream(options(), {"flood-0", "flood-1", "flood-2", "flood-3", "prefill-A"},
                        budgets_for(transport()));
  // Five connections' shares overrun the shared one: once every flooder was refused, some
  // refusal was the shared budget's.
  EXPECT_TRUE(refused_by.contains("max_queued_shared"));
}

TEST_P(QueueBudgets, AFloodUnderAGrantedPeersHelloNameDoesNotLockItOut) {
  // One connection: its share, smaller than the shared budget, refuses it.
  const auto refused_by = flood_then_stream(options(), {"prefill-A"}, budgets_for(transport()));
  EXPECT_EQ(refused_by, std::set<std::string>{"max_queued_per_connection"});
}

MEMWIRE_CONFORMANCE_SUITE(QueueBudgets);

}  // namespace
