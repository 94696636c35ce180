// memwire between two OS processes: this driver is the active side (ReadOperation /
// WriteOperation); a transfer_peer process it spawns is the passive side. Metadata crosses a pipe,
// as a sideband would carry it.
//
//   transfer_bench throughput --transport tcp|shm [--ops read,write] [--sizes 4K,...,1G]
//                  [--descs 1,16] [--conc 1,64] [--trials 5] [--large-trials 3]
//                  [--max-inflight 1G] [--target-bytes 256M] [--max-ops 2048] [--slots 1]
//                  [--gap 1] (descriptors GAP x their size apart: scattered blocks)
//   transfer_bench latency --transport tcp|shm [--sizes 64,4K] [--samples 3000] [--warmup 300]
//   transfer_bench fanin --transport tcp|shm [--owners 1,8,32,64] [--sizes 1M] [--samples 30]
//                  one reader, N owner processes, a fresh readable from each every round
//   transfer_bench connections --transport tcp|shm [--owners 16] [--conc 64] [--sizes 4K]
//                  one reader with OWNERS x CONC connections live (CONC reads in flight to each
//                  owner): its connections, threads and RSS (MEMWIRE_TCP_CONNECTIONS=CONC)
//   any mode: [--memory plain|shared] (the peer's buffers: plain pages, or a SharedBuffer that
//   a same-host driver maps)
//
// Throughput: one trial is a batch of operations, at most CONC in flight, timed from the first
// begin_* until the peer reports the batch's last passive operation complete (end to end).
// Latency: one READ at a time, from begin_read until both sides reported complete.
// Prints one line per figure and, on its last line, everything as JSON. A transport that cannot
// start on either side is reported as unavailable (exit code 0), not as a failure.
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "memwire/memwire.hpp"
#include "slot_layout.hpp"
#include "support/child_process.hpp"
#include "support/pattern.hpp"
#include "transfer_bench_args.hpp"

namespace {

using namespace memwire;
using namespace memwire::bench;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr std::uint64_t kPeerSeed = 1;    // what READs fetch
constexpr std::uint64_t kDriverSeed = 2;  // what WRITEs deliver
constexpr milliseconds kReply{120000};    // bounds every wait on the peer

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string size_name(std::size_t size) {
  if (size >= (1ull << 30) && size % (1ull << 30) == 0) return std::to_string(size >> 30) + "G";
  if (size >= (1ull << 20) && size % (1ull << 20) == 0) return std::to_string(size >> 20) + "M";
  if (size >= (1ull << 10) && size % (1ull << 10) == 0) return std::to_string(size >> 10) + "K";
  return std::to_string(size);
}

// The peer process and its line protocol (see transfer_peer.cpp).
class Peer {
 public:
  Peer(const std::string& binary, const std::string& transport, const std::string& memory)
      : process_({binary, "--transport", transport, "--memory", memory}) {
    hello_ = expect_line("peer start");
  }
  ~Peer() {
    try {
      process_.write_line("quit");
      process_.wait(std::chrono::seconds(10));
    } catch (...) {
    }
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  const std::string& hello() const { return hello_; }
  int pid() const { return process_.pid(); }

  std::string expect_line(const char* what) {
    auto line = process_.read_line(kReply);
    if (!line) fail(std::string("peer gave no answer to ") + what);
    if (line->rfind("error", 0) == 0) fail("peer: " + *line);
    return *line;
  }

  std::uint64_t alloc(std::size_t size, unsigned descs, unsigned slots, std::uint64_t seed,
                      unsigned gap = 1) {
    process_.write_line("alloc " + std::to_string(size) + " " + std::to_string(descs) + " " +
                        std::to_string(slots) + " " + std::to_string(seed) + " " +
                        std::to_string(gap));
    auto line = expect_line("alloc");
    return std::strtoull(line.c_str() + 3, nullptr, 10);
  }

  std::vector<RdmaMetadata> publish(bool readable, std::size_t count, bool each) {
    process_.write_line(std::string("publish ") + (readable ? "readable " : "writable ") +
                        std::to_string(count) + (each ? " each" : " all"));
    std::vector<RdmaMetadata> metadata;
    metadata.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      metadata.push_back(RdmaMetadata::from_json(expect_line("publish")));
    }
    return metadata;
  }

  struct Done {
    std::size_t errors = 0;
    std::uint64_t hwm_kb = 0, rss_kb = 0;
    std::string reason;
  };
  Done done() {
    auto line = expect_line("the end of a batch");
    std::istringstream words(line);
    std::string word;
    Done done;
    words >> word >> done.errors >> done.hwm_kb >> done.rss_kb;
    std::getline(words, done.reason);
    if (word != "done") fail("peer said '" + line + "' instead of done");
    return done;
  }

  // Empty when every buffer holds the pattern of `seed`; else where it first does not.
  std::string damage(std::uint64_t seed) {
    process_.write_line("verify " + std::to_string(seed));
    auto line = expect_line("verify");
    return line == "ok" ? "" : "peer's data differs after transfer: " + line;
  }

 private:
  test_support::ChildProcess process_;
  std::string hello_;
};

// Local buffers: SLOTS of SIZE bytes, each split into DESCS descriptors, GAP x their size apart.
struct LocalBuffers {
  PageBuffer memory;
  bench::SlotLayout layout;

  LocalBuffers(std::size_t size, unsigned descs, unsigned slot_count, std::uint64_t seed,
               unsigned gap_factor = 1)
      : memory(size * slot_count * gap_factor),
        layout(memory.data(), size, descs, slot_count, seed, gap_factor) {}

  // Empty when every slot holds the pattern of `seed`; else where it first does not.
  std::string damage(std::uint64_t seed) const {
    auto where = layout.damage(seed);
    return where.empty() ? where : "data differs after transfer: " + where;
  }
};

// Active operations in flight, at most one per free local slot.
struct Window {
  std::mutex mutex;
  std::condition_variable changed;
  // First in, first out: the first CONC operations use every slot once (the warm-up checks all).
  std::deque<unsigned> free_slots;
  std::size_t in_flight = 0;
  std::size_t completed = 0;
};

struct BatchResult {
  double seconds = 0;         // first begin_* until the peer reported the batch complete
  double active_seconds = 0;  // first begin_* until the last active operation completed
  double driver_cpu_seconds = 0, peer_cpu_seconds = 0;  // both processes' threads, this batch
  Peer::Done peer;
  std::string transport_used;
  std::string error;
};

BatchResult run_batch(Connector& connector, Peer& peer, LocalBuffers& local, bool read,
                      std::size_t count, std::size_t conc) {
  auto metadata = peer.publish(read, count, false);
  auto window = std::make_shared<Window>();
  for (unsigned s = 0; s < local.layout.slots.size(); ++s) window->free_slots.push_back(s);
  std::vector<std::optional<Operation>> operations(count);
  BatchResult result;

  const auto peer_pid = std::to_string(peer.pid());
  const double driver_cpu = process_cpu_seconds(), peer_cpu = process_cpu_seconds(peer_pid);
  const auto start = Clock::now();
  const auto deadline = start + kReply;
  for (std::size_t i = 0; i < count; ++i) {
    unsigned slot = 0;
    {
      std::unique_lock lock(window->mutex);
      if (!window->changed.wait_until(lock, deadline, [&] {
            return !window->free_slots.empty() && window->in_flight < conc;
          }))
        fail("operations did not complete in time");
      slot = window->free_slots.front();
      window->free_slots.pop_front();
      ++window->in_flight;
    }
    if (read) {
      operations[i].emplace(connector.begin_read(metadata[i], local.layout.slots[slot]));
    } else {
      operations[i].emplace(connector.begin_write(local.layout.slots[slot], metadata[i]));
    }
    operations[i]->on_complete([window, slot](OperationStatus) {
      std::lock_guard lock(window->mutex);
      window->free_slots.push_back(slot);
      --window->in_flight;
      ++window->completed;
      window->changed.notify_one();
    });
  }
  {
    std::unique_lock lock(window->mutex);
    if (!window->changed.wait_until(lock, deadline, [&] { return window->completed == count; }))
      fail("operations did not complete in time");
  }
  result.active_seconds = seconds_since(start);
  result.peer = peer.done();
  result.seconds = seconds_since(start);
  result.driver_cpu_seconds = process_cpu_seconds() - driver_cpu;
  result.peer_cpu_seconds = process_cpu_seconds(peer_pid) - peer_cpu;
  result.transport_used = operations.front()->transport();
  for (auto& operation : operations) {
    if (operation->status() != OperationStatus::Complete && result.error.empty()) {
      result.error = operation->error_message();
    }
  }
  if (result.error.empty() && result.peer.errors > 0) result.error = "peer: " + result.peer.reason;
  return result;
}

// Operations per trial: enough bytes to time well, at least one per slot, a multiple of CONC.
std::size_t batch_count(const Args& args, std::size_t size, unsigned conc) {
  std::size_t count = std::max<std::size_t>(1, (args.target_bytes + size - 1) / size);
  count = std::min(count, args.max_ops);
  count = std::max<std::size_t>(count, conc);
  return (count + conc - 1) / conc * conc;
}

json throughput(const Args& args, Connector& connector, Peer& peer) {
  json results = json::array();
  for (const auto& op : args.ops) {
    const bool read = op == "read";
    for (unsigned descs : args.descs) {
      for (unsigned conc : args.concurrency) {
        for (std::size_t size : args.sizes) {
          const unsigned slots = std::max(conc, args.slots);
          json entry = {{"op", op},     {"size", size},   {"descs", descs},
                        {"conc", conc}, {"slots", slots}, {"gap", args.gap}};
          if (conc * size > args.max_inflight) {
            entry["skipped"] = "conc x size exceeds --max-inflight " + size_name(args.max_inflight);
            results.push_back(entry);
            continue;
          }
          // Peer's buffers first, then ours: the previous configuration's are gone by then.
          const auto peer_rss = peer.alloc(size, descs, slots, read ? kPeerSeed : 0, args.gap);
          std::optional<LocalBuffers> local;
          local.emplace(size, descs, slots, read ? 0 : kDriverSeed, args.gap);
          // RSS before the reset: the new peak then starts at or above it.
          const auto local_rss = proc_status_kb("VmRSS");
          reset_peak_rss();
          const std::size_t count = batch_count(args, size, slots);

          // Warm-up: connections, caches; and proof that the bytes arrive intact.
          auto warm = run_batch(connector, peer, *local, read, slots, conc);
          std::string damage = read ? local->damage(kPeerSeed) : peer.damage(kDriverSeed);
          entry["transport_used"] = warm.transport_used;
          if (!warm.error.empty() || !damage.empty()) {
            entry["error"] = warm.error.empty() ? damage : warm.error;
            std::printf("%-5s %-5s d=%-2u c=%-2u %6s  error: %s\n", args.transport.c_str(),
                        op.c_str(), descs, conc, size_name(size).c_str(),
                        entry["error"].get<std::string>().c_str());
            results.push_back(entry);
            continue;
          }
          const int trials = size >= (256ull << 20) ? args.large_trials : args.trials;
          std::vector<double> gbps, active_gbps, driver_cpu_us, peer_cpu_us;
          std::uint64_t peer_hwm = 0;
          for (int t = 0; t < trials; ++t) {
            auto batch = run_batch(connector, peer, *local, read, count, conc);
            if (!batch.error.empty()) {
              entry["error"] = batch.error;
              break;
            }
            const double bytes = static_cast<double>(count * size);
            gbps.push_back(bytes / batch.seconds / 1e9);
            active_gbps.push_back(bytes / batch.active_seconds / 1e9);
            driver_cpu_us.push_back(batch.driver_cpu_seconds * 1e6 / count);
            peer_cpu_us.push_back(batch.peer_cpu_seconds * 1e6 / count);
            peer_hwm = std::max(peer_hwm, batch.peer.hwm_kb);
          }
          const auto local_hwm = proc_status_kb("VmHWM");
          local.reset();
          const auto s = summarize(gbps);
          const auto a = summarize(active_gbps);
          entry["count"] = count;
          entry["trials"] = gbps;
          entry["gbps"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
          entry["active_gbps_median"] = a.median;
          entry["ops_per_s_median"] = s.median * 1e9 / static_cast<double>(size);
          // CPU time per operation, all threads of each process (the driver's includes the
          // batch's bookkeeping, the peer's its line protocol): median of the trials.
          entry["cpu_us_per_op"] = {{"driver", summarize(driver_cpu_us).median},
                                    {"peer", summarize(peer_cpu_us).median}};
          // Buffers: RSS once the buffers are filled; hwm: peak during the timed trials.
          entry["rss_kb"] = {
              {"driver", {{"buffers", local_rss}, {"hwm", local_hwm}}},
              {"peer", {{"buffers", peer_rss}, {"hwm", peer_hwm}}},
          };
          std::printf(
              "%-5s %-5s d=%-2u c=%-2u %6s  %8.3f GB/s [%.3f-%.3f] x%zu ops  "
              "rss+ driver %lld KiB peer %lld KiB\n",
              args.transport.c_str(), op.c_str(), descs, conc, size_name(size).c_str(), s.median,
              s.min, s.max, count,
              static_cast<long long>(local_hwm) - static_cast<long long>(local_rss),
              static_cast<long long>(peer_hwm) - static_cast<long long>(peer_rss));
          std::fflush(stdout);
          results.push_back(entry);
        }
      }
    }
  }
  return results;
}

json latency(const Args& args, Connector& connector, Peer& peer) {
  json results = json::array();
  for (std::size_t size : args.sizes) {
    peer.alloc(size, 1, 1, kPeerSeed);
    LocalBuffers local(size, 1, 1, 0);
    const std::size_t total = args.warmup + args.samples;
    auto metadata = peer.publish(true, total, true);
    std::vector<double> end_to_end, active, begin;
    std::string used;
    for (std::size_t i = 0; i < total; ++i) {
      const auto start = Clock::now();
      auto read = connector.begin_read(metadata[i], local.layout.slots[0]);
      const double begin_us = seconds_since(start) * 1e6;  // the request is on the socket
      read.wait_for_completion(kReply);
      const double active_us = seconds_since(start) * 1e6;
      if (peer.expect_line("a completion") != "c") fail("peer did not report completion");
      const double both_us = seconds_since(start) * 1e6;
      if (i >= args.warmup) {
        end_to_end.push_back(both_us);
        active.push_back(active_us);
        begin.push_back(begin_us);
      }
      if (used.empty()) used = read.transport();
    }
    auto done = peer.done();
    if (done.errors > 0) fail("peer: " + done.reason);
    const auto e = summarize(end_to_end);
    const auto a = summarize(active);
    const auto b = summarize(begin);
    std::printf(
        "%-5s READ %6s  p50 %7.1f us  p99 %7.1f us   (active side alone: p50 %.1f p99 %.1f; "
        "begin_read alone: p50 %.1f)\n",
        args.transport.c_str(), size_name(size).c_str(), e.median, e.p99, a.median, a.p99,
        b.median);
    std::fflush(stdout);
    results.push_back(
        {{"op", "read"},
         {"size", size},
         {"samples", e.count},
         {"transport_used", used},
         {"us",
          {{"p50", e.median}, {"p90", e.p90}, {"p99", e.p99}, {"min", e.min}, {"max", e.max}}},
         {"active_us", {{"p50", a.median}, {"p99", a.p99}}},
         {"begin_us", {{"p50", b.median}, {"p99", b.p99}}}});
  }
  return results;
}

int thread_count() {
  std::error_code ignored;
  return static_cast<int>(
      std::distance(std::filesystem::directory_iterator("/proc/self/task", ignored),
                    std::filesystem::directory_iterator()));
}

// `count` owner processes, `first` and others started for the run, each with one buffer of
// `size` allocated.
struct Owners {
  Owners(const Args& args, Peer& first, unsigned count, std::size_t size) : peers{&first} {
    for (unsigned i = 1; i < count; ++i) {
      others.push_back(std::make_unique<Peer>(args.peer, args.transport, args.memory));
      peers.push_back(others.back().get());
    }
    for (auto* peer : peers) peer->alloc(size, 1, 1, kPeerSeed);
  }
  std::vector<std::unique_ptr<Peer>> others;
  std::vector<Peer*> peers;
};

// Fan-in: one reader, N owner processes, every round a fresh readable of SIZE from each (its
// owner waiting on it), all read at once; the round ends when every owner saw its readable
// complete. Reader threads counted with every connection live.
json fan_in(const Args& args, Connector& connector, Peer& first) {
  json results = json::array();
  const std::size_t size = args.sizes.front();
  for (unsigned owners : args.owners) {
    Owners owners_of_round(args, first, owners, size);
    const auto& peers = owners_of_round.peers;
    LocalBuffers local(size, 1, owners, 0);
    std::vector<double> rounds_ms, reads_ms;  // reads_ms: until this side's reads completed
    int threads = 0;
    for (std::size_t round = 0; round < args.warmup + args.samples; ++round) {
      std::vector<RdmaMetadata> metadata;
      for (auto* peer : peers) metadata.push_back(peer->publish(true, 1, true).front());
      const auto start = Clock::now();
      std::vector<ReadOperation> reads;
      for (unsigned i = 0; i < owners; ++i)
        reads.push_back(connector.begin_read(metadata[i], local.layout.slots[i]));
      for (auto& read : reads) read.wait_for_completion(kReply);
      if (round >= args.warmup) reads_ms.push_back(seconds_since(start) * 1e3);
      for (auto* peer : peers) {
        if (peer->expect_line("a completion") != "c") fail("peer did not report completion");
        if (auto done = peer->done(); done.errors > 0) fail("peer: " + done.reason);
      }
      if (round >= args.warmup) rounds_ms.push_back(seconds_since(start) * 1e3);
      threads = std::max(threads, thread_count());
    }
    const auto r = summarize(rounds_ms), read = summarize(reads_ms);
    const double aggregate = static_cast<double>(size) * owners / (r.median / 1e3) / 1e9;
    std::printf(
        "%-5s fan-in owners=%-4u %6s each  round p50 %8.2f ms (reads done %.2f)  p99 %8.2f ms  "
        "aggregate %.2f GB/s  reader threads %d\n",
        args.transport.c_str(), owners, size_name(size).c_str(), r.median, read.median, r.p99,
        aggregate, threads);
    std::fflush(stdout);
    results.push_back({{"owners", owners},
                       {"size", size},
                       {"rounds", r.count},
                       {"round_ms", {{"p50", r.median}, {"p99", r.p99}, {"max", r.max}}},
                       {"reads_done_ms", {{"p50", read.median}}},
                       {"aggregate_gbps", aggregate},
                       {"reader_threads", threads}});
  }
  return results;
}

// The reader's resident memory, kB (VmRSS).
long resident_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Open sockets of this process: the connections (and the listener, the peers' pipes are no
// sockets).
int socket_count() {
  int sockets = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ignored)) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

// Many live connections: OWNERS owner processes, CONC reads in flight to each at once (spread
// over tcp.connections_per_peer connections per owner: MEMWIRE_TCP_CONNECTIONS=CONC gives each
// read its own), twice (the second round reuses what the first opened). Threads, sockets and
// RSS of the reader with them live.
json connections(const Args& args, Connector& connector, Peer& first) {
  const std::size_t size = args.sizes.front();
  const unsigned owners = args.owners.front();
  const unsigned conc = args.concurrency.front();
  Owners owners_of_run(args, first, owners, size);
  const auto& peers = owners_of_run.peers;
  LocalBuffers local(size, 1, owners * conc, 0);
  const long rss_before = resident_kb();
  const int threads_before = thread_count(), sockets_before = socket_count();
  json rounds = json::array();
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<RdmaMetadata>> metadata;
    for (auto* peer : peers) metadata.push_back(peer->publish(true, conc, true));
    const auto start = Clock::now();
    std::vector<ReadOperation> reads;
    for (unsigned i = 0; i < owners; ++i)
      for (unsigned c = 0; c < conc; ++c)
        reads.push_back(connector.begin_read(metadata[i][c], local.layout.slots[i * conc + c]));
    for (auto& read : reads) read.wait_for_completion(kReply);
    const double ms = seconds_since(start) * 1e3;
    for (auto* peer : peers) {
      for (unsigned c = 0; c < conc; ++c)
        if (peer->expect_line("a completion") != "c") fail("peer did not report completion");
      if (auto done = peer->done(); done.errors > 0) fail("peer: " + done.reason);
    }
    const int sockets = socket_count() - sockets_before;
    const int threads = thread_count();
    const long rss = resident_kb();
    std::printf(
        "%-5s connections: round %d, %u owners x %u reads of %s in %.1f ms; %d sockets live, "
        "threads %d (before %d), RSS %.1f MiB (before %.1f)\n",
        args.transport.c_str(), round + 1, owners, conc, size_name(size).c_str(), ms, sockets,
        threads, threads_before, rss / 1024.0, rss_before / 1024.0);
    std::fflush(stdout);
    rounds.push_back({{"round", round + 1},
                      {"ms", ms},
                      {"sockets", sockets},
                      {"threads", threads},
                      {"rss_kb", rss}});
  }
  return json::array({{{"owners", owners},
                       {"concurrency", conc},
                       {"size", size},
                       {"threads_before", threads_before},
                       {"rss_kb_before", rss_before},
                       {"rounds", rounds}}});
}

}  // namespace

int main(int argc, char** argv) {
  json report;
  try {
    const Args args = parse_transfer_bench_args(argc, argv);
    report = {{"mode", args.mode}, {"transport", args.transport}, {"memory", args.memory}};
    Peer peer(args.peer, args.transport, args.memory);
    std::unique_ptr<Connector> connector;
    std::string reason;
    if (peer.hello().rfind("ready", 0) != 0) {
      reason = "peer: " + peer.hello().substr(std::min<std::size_t>(peer.hello().size(), 12));
    } else {
      try {
        auto options = ConnectorOptions::from_environment();
        options.transports = {args.transport};
        connector = std::make_unique<Connector>(options);
      } catch (const Error& error) {
        reason = std::string("driver: ") + error.what();
      }
    }
    if (!connector) {
      std::printf("%s: not available (%s)\n", args.transport.c_str(), reason.c_str());
      report["available"] = false;
      report["reason"] = reason;
    } else {
      report["available"] = true;
      report["results"] = args.mode == "latency"       ? latency(args, *connector, peer)
                          : args.mode == "fanin"       ? fan_in(args, *connector, peer)
                          : args.mode == "connections" ? connections(args, *connector, peer)
                                                       : throughput(args, *connector, peer);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "transfer_bench: %s\n", error.what());
    report["error"] = error.what();
    std::printf("%s\n", report.dump().c_str());
    return 1;
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
