// memwire-producer: a graph stage that makes embeddings for request ids and hands them on by
// name, either published for reading (--mode readable) or written into the consumer's memory
// on request (--mode writable).
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>

#include "common/exit_codes.hpp"
#include "common/signals.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"
#include "workers/embedding.hpp"
#include "workers/stage.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Then workers::kStageOptionsHelp.
constexpr const char* kHelp = R"(usage: memwire-producer (--http URL | --nats URL) [options]
  --mode readable|writable  publish for the consumer to read, or write into the consumer's
                            memory when it asks (request/reply); default readable
)";

// Set by SIGINT/SIGTERM; both modes wait on it together with their own progress.
struct Progress {
  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::uint64_t done = 0;
  std::deque<std::size_t> finished;  // leases whose operation ended, not yet reported
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int run_readable(sideband::Worker& worker, Progress& progress, const std::string& prefix,
                 std::uint64_t requests, std::size_t dim, Clock::time_point deadline,
                 const std::string& via) {
  auto started = Clock::now();
  std::vector<std::vector<float>> embeddings;
  std::vector<sideband::Lease> leases;
  for (std::uint64_t id = 0; id < requests; ++id) {
    embeddings.push_back(workers::make_embedding(id, dim));
    auto& values = embeddings.back();
    leases.push_back(worker.publish(workers::embedding_name(prefix, id),
                                    {Descriptor(std::span<float>(values))}));
  }
  std::cout << "producer: published " << requests << " embeddings " << prefix << ".req-0.."
            << prefix << ".req-" << requests - 1 << " (" << dim * sizeof(float) << " B each) via "
            << via << std::endl;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    // On memwire's progress thread: only note it and wake the main thread.
    leases[i].operation().on_complete([&progress, i](OperationStatus) {
      std::lock_guard lock(progress.mutex);
      progress.finished.push_back(i);
      progress.changed.notify_all();
    });
  }
  std::unique_lock lock(progress.mutex);
  while (progress.done < requests) {
    if (!progress.changed.wait_until(
            lock, deadline, [&] { return progress.stopping || !progress.finished.empty(); })) {
      throw Error(ErrorCode::Timeout, "only " + std::to_string(progress.done) + " of " +
                                          std::to_string(requests) +
                                          " embeddings were read in time");
    }
    if (progress.stopping) return 0;
    auto& lease = leases[progress.finished.front()];
    progress.finished.pop_front();
    ++progress.done;
    auto status = lease.operation().status();
    std::cout << "producer: " << lease.name()
              << (status == OperationStatus::Complete
                      ? " was read via " + lease.operation().transport()
                      : " ended unread: " + lease.operation().error_message())
              << std::endl;
  }
  std::cout << "producer: all " << requests << " read " << ms_since(started)
            << " ms after publishing began" << std::endl;
  return 0;
}

int run_writable(sideband::Worker& worker, Progress& progress, const std::string& prefix,
                 std::uint64_t requests, std::size_t dim, Clock::time_point deadline,
                 const std::string& via) {
  sideband::Worker::ServeOptions options;
  options.on_written = [&](const std::string& name, const WriteOperation& write) {
    std::lock_guard lock(progress.mutex);
    ++progress.done;
    std::cout << "producer: wrote " << name << " (" << dim * sizeof(float)
              << " B) into the consumer's memory via " << write.transport() << std::endl;
    progress.changed.notify_all();
  };
  auto subscription = worker.serve(
      prefix,
      [&](const std::string& name) {
        std::uint64_t id;
        try {
          id = workers::embedding_id(prefix, name);
        } catch (const std::exception&) {
          throw Error(ErrorCode::NotFound, "this producer makes only " + prefix + ".req-<id>");
        }
        // The handler's return keeps the embedding alive until the write is done.
        auto values = std::make_shared<std::vector<float>>(workers::make_embedding(id, dim));
        return sideband::ServedData{{Descriptor(std::span<float>(*values))}, values};
      },
      options);
  std::cout << "producer: serving " << prefix << ".req-<id> requests via " << via << std::endl;
  std::unique_lock lock(progress.mutex);
  if (!progress.changed.wait_until(
          lock, deadline, [&] { return progress.stopping || progress.done >= requests; })) {
    throw Error(ErrorCode::Timeout, "only " + std::to_string(progress.done) + " of " +
                                        std::to_string(requests) + " requests came in time");
  }
  return 0;
}

// The stage itself, once its command line is read.
int produce(const workers::StageOptions& options) {
  const auto& [args, mode, prefix, requests, dim, deadline, linger] = options;

  Progress progress;
  // Before any thread starts, so that all of them leave SIGINT/SIGTERM to the watcher.
  services::SignalWatcher watcher([&](int) {
    std::lock_guard lock(progress.mutex);
    progress.stopping = true;
    progress.changed.notify_all();
  });
  workers::StageWorker stage(args);
  auto& worker = stage.worker;
  const auto& via = stage.via;
  auto status = mode == "readable"
                    ? run_readable(worker, progress, prefix, requests, dim, deadline, via)
                    : run_writable(worker, progress, prefix, requests, dim, deadline, via);
  if (linger.count() > 0) {
    std::cout << "producer: lingering " << linger.count() << " ms" << std::endl;
    std::unique_lock lock(progress.mutex);
    progress.changed.wait_for(lock, linger, [&] { return progress.stopping; });
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  return workers::run_stage(argc, argv, "memwire-producer", kHelp, {"readable", "writable"},
                            produce);
}
