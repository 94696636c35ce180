// memwire-consumer: a graph stage that needs the embeddings of request ids and gets them by
// name: it reads what the producer published (--mode read) or asks the producer to write them
// into its own memory (--mode request). Checks every value and says how fast they came.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <thread>

#include "common/exit_codes.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"
#include "workers/embedding.hpp"
#include "workers/stage.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Then workers::kStageOptionsHelp.
constexpr const char* kHelp = R"(usage: memwire-consumer (--http URL | --nats URL) [options]
  --mode read|request       read the producer's published embeddings, or request them to be
                            written into this process's memory; default read
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

// The stage itself, once its command line is read.
int consume(const workers::StageOptions& options) {
  const auto& [args, mode, prefix, requests, dim, deadline, linger] = options;
  workers::StageWorker stage(args);
  auto& worker = stage.worker;
  const auto& via = stage.via;

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
}

}  // namespace

int main(int argc, char** argv) {
  return workers::run_stage(argc, argv, "memwire-consumer", kHelp, {"read", "request"}, consume);
}
