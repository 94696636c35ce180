#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "cli/mapped_file.hpp"
#include "cli/progress.hpp"
#include "common/channel_options.hpp"
#include "common/signals.hpp"
#include "common/telemetry.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kAttempts = 5;

std::string in_seconds(milliseconds span) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(span.count()) / 1000);
  return text;
}

// The temporary file being written, removed when SIGINT or SIGTERM ends the program.
struct PendingOutput {
  std::mutex mutex;
  std::string path;
};

struct ReadResult {
  std::string transport;
  std::chrono::nanoseconds took;
};

// One read of `metadata` into `output`; waits with a redrawn progress line.
ReadResult read_once(Connector& connector, const RdmaMetadata& metadata, OutputFile& output,
                     const std::string& name, Clock::time_point deadline, milliseconds timeout,
                     bool show_progress) {
  std::vector<Descriptor> local;
  std::uint64_t offset = 0;
  for (const auto& remote : metadata.descriptors()) {
    if (remote.size > output.size() - offset)
      throw Error(ErrorCode::InvalidMetadata, "'" + name + "' describes more bytes than it sums");
    local.emplace_back(output.data() + offset, remote.size);
    offset += remote.size;
  }
  Progress progress(name, output.size(), show_progress);
  const auto began = Clock::now();
  // Declared before the operation: dropping it early (a timeout) runs the callback below.
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  auto operation = connector.begin_read(metadata, local);
  operation.on_complete([&](OperationStatus) {
    std::lock_guard lock(mutex);
    finished = true;
    done.notify_all();
  });
  {
    std::unique_lock lock(mutex);
    // The tick only redraws the progress line; completion wakes us at once.
    while (!done.wait_for(lock, std::min(milliseconds(100), left_until(deadline)),
                          [&] { return finished; })) {
      if (Clock::now() >= deadline) break;
      lock.unlock();
      progress.tick(output.bytes_written());
      lock.lock();
    }
    if (!finished) {
      progress.finish(false, Clock::now() - began);
      // The whole --timeout, not the sliver left of it: that is what the user gave.
      throw Error(ErrorCode::Timeout,
                  "reading '" + name + "' timed out after " + in_seconds(timeout) + " (--timeout)");
    }
  }
  const auto took = Clock::now() - began;
  try {
    operation.wait_for_completion(milliseconds(0));  // it ended: throws why, unless complete
  } catch (const Error& error) {
    progress.finish(false, took);
    if (error.code() != ErrorCode::Cancelled) throw;
    throw Error(ErrorCode::Cancelled,
                "reading " + name + " was cancelled: " + std::string(error.message()));
  } catch (...) {
    progress.finish(false, took);
    throw;
  }
  progress.finish(true, took);
  return {operation.transport(), took};
}

}  // namespace

// memwire get NAME OUT [--timeout S] [--wait] [--progress]
int get(int argc, char** argv, int first) {
  auto valued = services::channel_option_names();
  valued.insert("--timeout");
  services::Arguments args(argc, argv, first, valued, {"--wait", "--progress"});
  if (args.positional().size() != 2) throw services::UsageError("get needs NAME OUT");
  const auto& name = services::checked_name(args.positional()[0]);
  const auto& out = args.positional()[1];
  const auto timeout = args.get_seconds("--timeout", std::chrono::seconds(30));
  const bool show_progress = args.has("--progress") || isatty(STDERR_FILENO) == 1;
  // Before anything is fetched: a target memwire will not write is a usage error.
  OutputFile::check_target(out);

  // Before any thread starts: every thread then leaves SIGINT/SIGTERM to the watcher, which
  // removes the temporary file and ends the program as the signal would have.
  static PendingOutput pending;
  services::SignalWatcher watcher([](int signal) {
    std::lock_guard lock(pending.mutex);
    if (!pending.path.empty()) ::unlink(pending.path.c_str());
    std::_Exit(128 + signal);
  });

  auto started = Clock::now();
  auto deadline = started + timeout;
  Connector connector(services::connector_options_from_environment());
  auto channel = services::make_channel(args);
  // What is left of --timeout: making the channel may have waited (a cluster electing leaders).
  const auto lookup = std::max(milliseconds(1), left_until(deadline));
  auto metadata =
      args.has("--wait") ? channel->wait_for(name, lookup) : channel->fetch(name, lookup);
  auto pause = milliseconds(5);
  for (int attempt = 1;; ++attempt) {
    if (metadata.operation_kind() != OperationKind::Read) {
      throw Error(ErrorCode::Pairing, "'" + name + "' is published for writing, not reading");
    }
    try {
      // Created under the lock the signal watcher takes: a signal right after the temporary
      // file appears still finds its path and removes it.
      std::optional<OutputFile> created;
      {
        std::lock_guard lock(pending.mutex);
        created.emplace(out, metadata.total_size());
        pending.path = created->temp_path();
      }
      auto& output = *created;
      auto result = read_once(connector, metadata, output, name, deadline, timeout, show_progress);
      const auto size = output.size();
      {
        std::lock_guard lock(pending.mutex);
        output.commit();
        pending.path.clear();
      }
      auto total = Clock::now() - started;
      std::cout << "got " << name << " " << size << " bytes via " << result.transport << " in "
                << std::chrono::duration<double>(result.took).count() << " s ("
                << Progress::rate(size, result.took) << "; "
                << std::chrono::duration<double>(total).count() << " s with lookup) -> " << out
                << std::endl;
      return 0;
    } catch (const Error& e) {
      {
        std::lock_guard lock(pending.mutex);
        pending.path.clear();
      }
      // `memwire serve --count N` publishes NAME again after each read: a reader that fetched
      // just before may find that memory consumed (or its metadata since renewed). Look again
      // (briefly, a bounded number of times) for NAME to point at new memory; any other failure
      // stands.
      bool consumed = e.code() == ErrorCode::AccessDenied || e.code() == ErrorCode::NotFound ||
                      e.code() == ErrorCode::Cancelled || e.code() == ErrorCode::Expired;
      if (!consumed || attempt >= kAttempts) throw;
      for (;;) {
        if (left_until(deadline) <= pause) throw;
        // A deliberate pause before looking again: the server is republishing right now.
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, milliseconds(200));
        auto again = channel->fetch(name, left_until(deadline));
        // New memory, or the same memory renewed (a later expiry): worth another read.
        if (again != metadata) {
          metadata = std::move(again);
          break;
        }
      }
    }
  }
}

}  // namespace memwire::cli
