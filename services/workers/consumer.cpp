// memwire-consumer: a graph stage that needs the embeddings of request ids and gets them by
// name: it reads what the producer published (--mode read) or asks the producer to write them
// into its own memory (--mode request). Checks every value and says how fast they came.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <thread>

#include "common/arguments.hpp"
#include "common/channel_options.hpp"
#include "common/exit_codes.hpp"
#include "common/telemetry.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"
#include "workers/embedding.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kHelp = R"(usage: memwire-consumer (--http URL | --nats URL) [options]
  --mode read|request  read the producer's published embeddings, or request them to be
                       written into this process's memory; default read
  --prefix P           names are P.req-<id> (default emb)
  --requests N         request ids 0..N-1 (default 8)
  --dim D              floats per embedding (default 1024)
  --timeout S          give up after S seconds (default 30)
  --metrics-listen ADDR:PORT  serve GET /metrics and /healthz there (default:
                       $MEMWIRE_METRICS_LISTEN; absent: none)
  --linger S           stay up S seconds after finishing, for a last scrape (default 0)
  auth: --token T, --user U --password P, --ca-file F
  --kv-replicas N      NATS: copies of the registry bucket if this creates it (default 0 =
                       one per server of the cluster, up to 3)
  --inbox-prefix P     NATS: where replies to this process come (default _INBOX_<user>, or
                       _INBOX without --user)
)";

// Stages start in any order: until the producer serves the prefix, a request is NotFound.
WritableOperation request_when_served(sideband::Worker& worker, const std::string& name,
                                      std::vector<Descriptor> local, Clock::time_point deadline) {
  auto pause = milliseconds(10);
  for (;;) {
    try {
      return worker.request(name, local, left_until(deadline));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::NotFound || left_until(deadline) <= pause) throw;
    }
    // A deliberate pause before asking again, not a wait for a state change we could watch.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto valued = services::channel_option_names();
    valued.insert({"--mode", "--prefix", "--requests", "--dim", "--timeout",
                   services::kMetricsListen, services::kLinger});
    services::Arguments args(argc, argv, 1, valued, {"--help"});
    if (args.has("--help")) {
      std::cout << kHelp;
      return 0;
    }
    if (!args.positional().empty()) {
      throw services::UsageError("unexpected argument " + args.positional()[0]);
    }
    auto mode = args.get("--mode", "read");
    if (mode != "read" && mode != "request")
      throw services::UsageError("--mode is read or request");
    auto prefix = args.get("--prefix", "emb");
    sideband::validate_name(prefix);
    auto requests = args.get_uint("--requests", 8);
    auto dim = static_cast<std::size_t>(args.get_uint("--dim", 1024));
    if (requests == 0 || dim == 0) throw services::UsageError("--requests and --dim must be > 0");
    auto deadline = Clock::now() + args.get_seconds("--timeout", std::chrono::seconds(30));

    const auto linger = services::linger_of(args);
    Connector connector(services::connector_options_from_environment());
    auto metrics = services::start_metrics_listener(args, connector);
    auto channel = services::make_channel(args);
    sideband::Worker worker(connector, *channel);
    auto via = services::channel_kind(args);

    std::cout << std::fixed << std::setprecision(2);
    std::vector<double> latencies_ms;
    std::string transport;
    std::uint64_t bytes = 0;
    auto started = Clock::now();
    for (std::uint64_t id = 0; id < requests; ++id) {
      auto name = workers::embedding_name(prefix, id);
      std::vector<float> values(dim, 0.0f);
      std::vector<Descriptor> local{Descriptor(std::span<float>(values))};
      auto begin = Clock::now();
      if (mode == "read") {
        for (;;) {
          try {
            auto read = worker.read(name, local, left_until(deadline),
                                    sideband::Worker::Lookup::WaitUntilPublished);
            transport = read.transport();
            break;
          } catch (const Error& e) {
            // A registry read sent while a new NATS cluster elects the bucket's leader goes
            // unanswered for one request timeout: this worker's own deadline is what counts.
            if (e.code() != ErrorCode::Timeout || left_until(deadline) <= std::chrono::seconds(1))
              throw;
          }
        }
      } else {
        auto written = request_when_served(worker, name, local, deadline);
        transport = written.transport();
      }
      auto took = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
      latencies_ms.push_back(took);
      if (auto bad = workers::first_mismatch(values, id); bad >= 0) {
        throw Error(ErrorCode::Protocol, name + ": element " + std::to_string(bad) +
                                             " is wrong: got " + std::to_string(values[bad]) +
                                             ", want " +
                                             std::to_string(workers::embedding_value(id, bad)));
      }
      bytes += values.size() * sizeof(float);
      std::cout << "consumer: " << (mode == "read" ? "read " : "received ") << name << " ("
                << values.size() * sizeof(float) << " B) via "
                << (transport.empty() ? std::string("?") : transport) << " in " << took
                << " ms, contents ok" << std::endl;
    }
    auto total = std::chrono::duration<double>(Clock::now() - started).count();
    std::sort(latencies_ms.begin(), latencies_ms.end());
    std::cout << "consumer: " << requests << "/" << requests << " embeddings verified, " << bytes
              << " B moved by " << (transport.empty() ? std::string("?") : transport)
              << ", metadata by " << via << ", "
              << (mode == "read" ? "consumer read producer's readable memory"
                                 : "producer wrote into consumer's writable memory")
              << "; median " << latencies_ms[latencies_ms.size() / 2] << " ms per name, "
              << static_cast<double>(bytes) / total / 1e6 << " MB/s overall" << std::endl;
    if (linger.count() > 0) {
      // SIGTERM ends the wait: the default action ends the process.
      std::cout << "consumer: lingering " << linger.count() << " ms" << std::endl;
      std::this_thread::sleep_for(linger);
    }
    return 0;
  } catch (...) {
    return services::report_failure("memwire-consumer", std::current_exception());
  }
}
