#include <condition_variable>
#include <iostream>
#include <mutex>

#include "cli/commands.hpp"
#include "cli/mapped_file.hpp"
#include "common/channel_options.hpp"
#include "common/signals.hpp"
#include "common/telemetry.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"

namespace memwire::cli {

// The shortest --metadata-ttl-ms: renewals run at half of it.
constexpr std::chrono::milliseconds kShortestLifetime(100);

// memwire serve NAME FILE [--count N] [--ttl-ms T] [--metadata-ttl-ms L]: after each read the
// same bytes are published again under NAME (republish: no moment where the name is missing),
// until N reads are done. The file is served from a read-only mapping (no copy); the worker
// renews the metadata and the name before they expire, for as long as it serves.
int serve(int argc, char** argv, int first) {
  auto valued = services::channel_option_names();
  valued.insert({"--count", "--ttl-ms", "--metadata-ttl-ms", services::kMetricsListen});
  services::Arguments args(argc, argv, first, valued);
  if (args.positional().size() != 2) throw services::UsageError("serve needs NAME FILE");
  const auto& name = services::checked_name(args.positional()[0]);
  const auto& path = args.positional()[1];
  auto count = args.get_uint("--count", 1);
  auto ttl =
      args.get_milliseconds("--ttl-ms", std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  auto options = services::connector_options_from_environment();
  options.metadata_ttl =
      args.get_milliseconds("--metadata-ttl-ms", options.metadata_ttl, kShortestLifetime);

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::uint64_t generation = 0;
  std::optional<OperationStatus> finished;
  // Before any thread starts: every thread then leaves SIGINT/SIGTERM to the watcher.
  services::SignalWatcher watcher([&](int) {
    std::lock_guard lock(mutex);
    stopping = true;
    changed.notify_all();
  });

  InputFile file(path);
  Connector connector(options);
  auto metrics = services::start_metrics_listener(args, connector);
  auto channel = services::make_channel(args);
  sideband::Worker worker(connector, *channel);
  std::vector<Descriptor> local{Descriptor(file.data(), file.size())};

  auto watch = [&](sideband::Lease& lease) {
    std::uint64_t mine;
    {
      std::lock_guard lock(mutex);
      mine = ++generation;
      finished.reset();
    }
    // Runs on memwire's progress thread: only record and wake.
    lease.operation().on_complete([&, mine](OperationStatus status) {
      std::lock_guard lock(mutex);
      if (mine != generation) return;
      finished = status;
      changed.notify_all();
    });
  };

  auto lease = worker.publish(name, local, ttl);
  watch(lease);
  std::cout << "published " << name << " " << file.size() << " bytes from " << path << " via "
            << services::channel_kind(args) << std::endl;
  std::uint64_t reads = 0;
  for (;;) {
    OperationStatus status;
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return stopping || finished.has_value(); });
      if (stopping) break;
      status = *finished;
    }
    if (status == OperationStatus::Complete) {
      ++reads;
      std::cout << "read " << name << " " << file.size() << " bytes via "
                << lease.operation().transport() << " (" << reads << "/"
                << (count == 0 ? std::string("unlimited") : std::to_string(count)) << ")"
                << std::endl;
      if (count != 0 && reads >= count) break;
    } else {
      std::cerr << "memwire: a read of " << name << " failed: " << lease.operation().error_message()
                << std::endl;
    }
    worker.republish(lease, local, ttl);
    watch(lease);
  }
  lease.close();
  return 0;
}

}  // namespace memwire::cli
