// mwlab-peer: the producer and consumer of the namespace lab (integration/hosts/netns/run).
// Both speak through the real library (Connector, Worker, NatsChannel or HttpChannel) and
// print machine-readable lines the lab script turns into one verdict line per scenario.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/arguments.hpp"
#include "common/exit_codes.hpp"
#include "common/signals.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/http.hpp"
#include "memwire/sideband/nats.hpp"
#include "memwire/sideband/worker.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kHelp =
    R"(usage: mwlab-peer producer|consumer (--nats URL[,URL...] | --http URL) [options]
  common:   --prefix P (names P.0 .. P.N-1)  --names N  --size BYTES  --user U --password W
            --kv-replicas R (when creating the NATS bucket)
  producer: publishes every name for reading (again after each read) and serves requests for
            P.*; until SIGTERM. --write-timeout-ms T bounds each write into a requester.
  consumer: --mode read|request|both  --transfers K  --first I (uses names P.I .. P.I+N-1)
            --deadline-ms D (per transfer)  --pause-ms M (between transfers)  --hang-grace-ms G
            --for-ms T (instead of K transfers: begin transfers until T ms have passed; the
            soak's consumers)
output: "event KIND key=value ..." lines, then one "result ..." line.
)";

std::int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// stdout is shared by threads: one whole line at a time, flushed (the script tails it live).
std::mutex output_mutex;
void say(const std::string& line) {
  std::lock_guard lock(output_mutex);
  std::cout << line << std::endl;
}

// Byte `offset` of name number `index`: every name and position differs, so a byte from the
// wrong name or place is seen.
std::uint8_t pattern_byte(std::size_t index, std::size_t offset) {
  return static_cast<std::uint8_t>(((offset * 2654435761u) >> 13) + index * 97 + 13);
}

void fill(std::vector<std::byte>& buffer, std::size_t index) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = std::byte{pattern_byte(index, i)};
}

std::size_t wrong_bytes(const std::byte* data, std::size_t size, std::size_t index) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < size; ++i) wrong += data[i] != std::byte{pattern_byte(index, i)};
  return wrong;
}

// The error's code as one token ("peer_lost"), for the script to match.
std::string code_of(const std::exception& error) {
  auto* e = dynamic_cast<const Error*>(&error);
  std::string code = e ? std::string(to_string(e->code())) : "other";
  std::replace(code.begin(), code.end(), ' ', '_');
  return code;
}

std::string one_line(std::string text) {
  for (auto& c : text) c = (c == '\n' || c == '"') ? '\'' : c;
  return text;
}

struct Setup {
  std::string prefix;
  std::size_t names = 0;
  std::size_t size = 0;
  std::string name(std::size_t index) const { return prefix + "." + std::to_string(index); }
};

// The channel, retried while the cluster elects leaders (bounded): a client started during a
// failover waits for it rather than failing at once.
std::unique_ptr<sideband::Channel> open_channel(const services::Arguments& args,
                                                const std::string& who) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (int attempt = 1;; ++attempt) {
    try {
      if (args.has("--http")) {
        sideband::HttpChannelOptions options;
        options.url = args.get("--http");
        options.max_retries = 1;
        options.request_timeout = std::chrono::seconds(2);
        return std::make_unique<sideband::HttpChannel>(std::move(options));
      }
      sideband::NatsOptions options;
      options.servers = {args.get("--nats")};
      options.user = args.get("--user");
      options.password = args.get("--password");
      options.kv_replicas = static_cast<int>(args.get_uint("--kv-replicas", 1));
      options.connection_name = who;
      options.reconnect_wait = milliseconds(100);
      options.request_timeout = std::chrono::seconds(2);
      options.on_disconnected = [] { say("event disconnected at=" + std::to_string(unix_ms())); };
      options.on_reconnected = [] { say("event reconnected at=" + std::to_string(unix_ms())); };
      auto channel = std::make_unique<sideband::NatsChannel>(std::move(options));
      say("event connected url=" + channel->connected_url());
      return channel;
    } catch (const Error& error) {
      if (Clock::now() >= deadline || error.code() == ErrorCode::AccessDenied) throw;
      say("event channel-retry attempt=" + std::to_string(attempt) + " code=" + code_of(error));
    }
    std::this_thread::sleep_for(milliseconds(250));  // the cluster is electing: look again
  }
}

int run_producer(const services::Arguments& args, const Setup& setup) {
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::deque<std::size_t> finished;  // names whose read ended: publish them again
  services::SignalWatcher watcher([&](int) {
    std::lock_guard lock(mutex);
    stopping = true;
    changed.notify_all();
  });

  Connector connector(ConnectorOptions::from_environment());
  auto channel = open_channel(args, "mwlab-producer");
  sideband::Worker worker(connector, *channel);
  const milliseconds write_timeout(args.get_uint("--write-timeout-ms", 10000));

  std::vector<std::vector<std::byte>> buffers(setup.names);
  for (std::size_t i = 0; i < setup.names; ++i) {
    buffers[i].resize(setup.size);
    fill(buffers[i], i);
  }
  auto descriptors = [&](std::size_t i) {
    return std::vector<Descriptor>{Descriptor(buffers[i].data(), buffers[i].size())};
  };
  std::atomic<std::uint64_t> writes{0}, write_errors{0}, reads{0}, publish_errors{0};

  // Requests: write name i's bytes into the requester's memory, bounded by write_timeout.
  // Requests travel over NATS only here: the registry scenario reads.
  std::unique_ptr<sideband::Subscription> subscription;
  if (args.has("--nats"))
    subscription =
        channel->serve(setup.prefix, [&](const std::string& name, const RdmaMetadata& writable) {
          const auto started = Clock::now();
          std::size_t index = std::stoul(name.substr(setup.prefix.size() + 1));
          if (index >= setup.names) throw Error(ErrorCode::NotFound, "no such name " + name);
          try {
            auto write = connector.begin_write(descriptors(index), writable);
            auto status = write.wait_for_completion(write_timeout);
            if (status != OperationStatus::Complete) {
              throw Error(ErrorCode::Cancelled, "write cancelled: " + write.error_message());
            }
            ++writes;
          } catch (const std::exception& error) {
            ++write_errors;
            say("event write-error name=" + name + " code=" + code_of(error) + " after-ms=" +
                std::to_string(
                    std::chrono::duration_cast<milliseconds>(Clock::now() - started).count()) +
                " at=" + std::to_string(unix_ms()) + " why=\"" + one_line(error.what()) + "\"");
            throw;
          }
        });

  std::vector<std::optional<sideband::Lease>> leases(setup.names);
  // The callback may run at once, on this thread: nothing may be locked while registering.
  std::vector<std::atomic<std::uint64_t>> generation(setup.names);
  auto watch = [&](std::size_t i) {
    auto mine = ++generation[i];
    leases[i]->operation().on_complete([&, i, mine](OperationStatus status) {
      if (status == OperationStatus::Complete) ++reads;
      if (generation[i] != mine) return;  // an older publication of the name
      std::lock_guard lock(mutex);
      finished.push_back(i);
      changed.notify_all();
    });
  };
  std::deque<std::size_t> unpublished;
  for (std::size_t i = 0; i < setup.names; ++i) {
    try {
      leases[i].emplace(worker.publish(setup.name(i), descriptors(i)));
      watch(i);
    } catch (const std::exception&) {
      ++publish_errors;
      unpublished.push_back(i);
    }
  }
  say("event ready names=" + std::to_string(setup.names) + " at=" + std::to_string(unix_ms()));

  for (;;) {
    std::deque<std::size_t> work;
    {
      std::unique_lock lock(mutex);
      // Unpublished names (the sideband was down) are tried again every 200 ms.
      changed.wait_for(lock, milliseconds(unpublished.empty() ? 60'000 : 200),
                       [&] { return stopping || !finished.empty(); });
      if (stopping) break;
      work.swap(finished);
    }
    work.insert(work.end(), unpublished.begin(), unpublished.end());
    unpublished.clear();
    for (auto i : work) {
      try {
        if (!leases[i]) {
          leases[i].emplace(worker.publish(setup.name(i), descriptors(i)));
        } else {
          worker.republish(*leases[i], descriptors(i));
        }
        watch(i);
      } catch (const std::exception& error) {
        ++publish_errors;
        unpublished.push_back(i);
        say("event publish-error name=" + setup.name(i) + " code=" + code_of(error) +
            " at=" + std::to_string(unix_ms()));
      }
    }
  }
  subscription.reset();
  std::size_t changed_bytes = 0;
  for (std::size_t i = 0; i < setup.names; ++i) {
    changed_bytes += wrong_bytes(buffers[i].data(), buffers[i].size(), i);
  }
  say("result producer reads " + std::to_string(reads) + " writes " + std::to_string(writes) +
      " write-errors " + std::to_string(write_errors) + " publish-errors " +
      std::to_string(publish_errors) + " memory " + (changed_bytes == 0 ? "intact" : "CHANGED"));
  leases.clear();
  return changed_bytes == 0 ? 0 : 1;
}

int run_consumer(const services::Arguments& args, const Setup& setup) {
  const auto mode = args.get("--mode", "read");
  if (mode != "read" && mode != "request" && mode != "both") {
    throw services::UsageError("--mode is read, request or both");
  }
  const auto transfers = args.get_uint("--transfers", 10);
  const auto first = args.get_uint("--first", 0);
  const milliseconds deadline(args.get_uint("--deadline-ms", 5000));
  const milliseconds pause(args.get_uint("--pause-ms", 0));
  const milliseconds grace(args.get_uint("--hang-grace-ms", 3000));
  const milliseconds run_for(args.get_uint("--for-ms", 0));
  const auto until = Clock::now() + run_for;
  auto more = [&](std::uint64_t t) {
    return run_for.count() > 0 ? Clock::now() < until : t < transfers;
  };

  Connector connector(ConnectorOptions::from_environment());
  auto channel = open_channel(args, "mwlab-consumer");
  sideband::Worker worker(connector, *channel);

  // The destination sits between two guard zones: a late or stray write shows there.
  constexpr std::size_t kGuard = 4096;
  constexpr std::byte kGuardByte{0xA5};
  std::vector<std::byte> memory(setup.size + 2 * kGuard);
  std::byte* destination = memory.data() + kGuard;

  std::atomic<std::uint64_t> attempted{0}, completed{0}, failed{0}, wrong{0};
  std::map<std::string, std::uint64_t> transports;
  bool untouched = true;

  // The watchdog: a transfer running past its deadline plus the grace is a hang. The verdict
  // line is printed from here and the process ends, since the hung call never returns.
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Clock::time_point> running_since;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    for (;;) {
      if (done) return;
      if (running_since && Clock::now() > *running_since + deadline + grace) {
        say("result consumer attempted " + std::to_string(attempted) + " completed " +
            std::to_string(completed) + " failed " + std::to_string(failed) +
            " hung 1 wrong-bytes " + std::to_string(wrong) + " untouched unknown");
        ::_exit(3);
      }
      changed.wait_for(lock, milliseconds(100));
    }
  });

  for (std::uint64_t t = 0; more(t); ++t) {
    const std::size_t index = first + t % setup.names;
    const std::string name = setup.name(index);
    const bool read = mode == "read" || (mode == "both" && t % 2 == 0);
    std::fill(memory.begin(), memory.end(), kGuardByte);
    std::vector<Descriptor> local{Descriptor(destination, setup.size)};
    const auto started = Clock::now();
    {
      std::lock_guard lock(mutex);
      running_since = started;
    }
    ++attempted;
    say("event begin name=" + name + " op=" + (read ? "read" : "request") +
        " at=" + std::to_string(unix_ms()));
    std::string transport;
    try {
      if (read) {
        transport = worker.read(name, local, deadline).transport();
      } else {
        transport = worker.request(name, local, deadline).transport();
      }
      ++completed;
      ++transports[transport];
      say("event done name=" + name + " via=" + transport + " ms=" +
          std::to_string(std::chrono::duration_cast<milliseconds>(Clock::now() - started).count()) +
          " at=" + std::to_string(unix_ms()));
      std::size_t bad = wrong_bytes(destination, setup.size, index);
      wrong += bad;
      if (bad != 0) say("event wrong-bytes name=" + name + " count=" + std::to_string(bad));
    } catch (const std::exception& error) {
      ++failed;
      const auto after = std::chrono::duration_cast<milliseconds>(Clock::now() - started).count();
      say("event error name=" + name + " op=" + (read ? "read" : "request") +
          " code=" + code_of(error) + " after-ms=" + std::to_string(after) +
          " at=" + std::to_string(unix_ms()) + " why=\"" + one_line(error.what()) + "\"");
      // Our memory after a failure: nothing may land in it later, nor beside it.
      std::vector<std::byte> snapshot(destination, destination + setup.size);
      std::this_thread::sleep_for(milliseconds(200));
      bool stable = std::equal(snapshot.begin(), snapshot.end(), destination);
      bool guards = std::all_of(memory.begin(), memory.begin() + kGuard,
                                [&](std::byte b) { return b == kGuardByte; }) &&
                    std::all_of(memory.end() - kGuard, memory.end(),
                                [&](std::byte b) { return b == kGuardByte; });
      if (!stable || !guards) {
        untouched = false;
        say("event memory-touched name=" + name + " stable=" + std::to_string(stable) +
            " guards=" + std::to_string(guards));
      }
    }
    {
      std::lock_guard lock(mutex);
      running_since.reset();
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  {
    std::lock_guard lock(mutex);
    done = true;
    changed.notify_all();
  }
  watchdog.join();
  std::string used;
  for (const auto& [name, count] : transports) {
    used += (used.empty() ? "" : ",") + name + ":" + std::to_string(count);
  }
  say("result consumer attempted " + std::to_string(attempted) + " completed " +
      std::to_string(completed) + " failed " + std::to_string(failed) + " hung 0 wrong-bytes " +
      std::to_string(wrong) + " untouched " + (untouched ? "yes" : "no") + " transports " +
      (used.empty() ? "none" : used));
  return wrong == 0 && untouched ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::cerr << kHelp;
    return argc < 2 ? services::kUsage : services::kOk;
  }
  const std::string role = argv[1];
  try {
    services::Arguments args(
        argc, argv, 2,
        {"--nats", "--http", "--user", "--password", "--prefix", "--names", "--size",
         "--kv-replicas", "--write-timeout-ms", "--mode", "--transfers", "--first", "--deadline-ms",
         "--pause-ms", "--hang-grace-ms", "--for-ms"});
    if (args.has("--nats") == args.has("--http")) {
      throw services::UsageError("give exactly one of --nats URLS or --http URL");
    }
    Setup setup{args.get("--prefix", "lab"), args.get_uint("--names", 4),
                args.get_uint("--size", 1 << 20)};
    sideband::validate_name(setup.prefix);
    if (setup.names == 0 || setup.size == 0) {
      throw services::UsageError("--names and --size must be > 0");
    }
    if (role == "producer") return run_producer(args, setup);
    if (role == "consumer") return run_consumer(args, setup);
    throw services::UsageError("the role is producer or consumer");
  } catch (...) {
    return services::report_failure("mwlab-peer", std::current_exception());
  }
}
