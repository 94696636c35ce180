#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.hpp"
#include "cli/file_bytes.hpp"
#include "cli/progress.hpp"
#include "common/channel_options.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kAttempts = 5;

milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// One read of `metadata` into `buffer`; waits with a redrawn progress line.
std::string read_once(Connector& connector, const RdmaMetadata& metadata,
                      std::vector<std::byte>& buffer, const std::string& name,
                      Clock::time_point deadline) {
  std::vector<Descriptor> local;
  std::size_t offset = 0;
  for (const auto& remote : metadata.descriptors()) {
    local.emplace_back(buffer.data() + offset, remote.size);
    offset += remote.size;
  }
  Progress progress(name, buffer.size());
  auto operation = connector.begin_read(metadata, local);
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  operation.on_complete([&](OperationStatus) {
    std::lock_guard lock(mutex);
    finished = true;
    done.notify_all();
  });
  {
    std::unique_lock lock(mutex);
    // The 100 ms tick only redraws the progress line; completion wakes us at once.
    while (!done.wait_for(lock, milliseconds(100), [&] { return finished; })) {
      if (Clock::now() >= deadline) break;
      lock.unlock();
      progress.tick();
      lock.lock();
    }
  }
  try {
    auto status = operation.wait_for_completion(std::max(left_until(deadline), milliseconds(1)));
    if (status != OperationStatus::Complete) {
      throw Error(ErrorCode::Cancelled,
                  "reading " + name + " was cancelled: " + operation.error_message());
    }
  } catch (...) {
    progress.finish(false);
    throw;
  }
  progress.finish(true);
  return operation.transport();
}

}  // namespace

// memwire get NAME OUT [--timeout S] [--wait]
int get(int argc, char** argv, int first) {
  auto valued = services::channel_option_names();
  valued.insert("--timeout");
  services::Arguments args(argc, argv, first, valued, {"--wait"});
  if (args.positional().size() != 2) throw services::UsageError("get needs NAME OUT");
  const auto& name = args.positional()[0];
  const auto& out = args.positional()[1];
  sideband::validate_name(name);
  auto timeout = milliseconds(static_cast<long long>(args.get_double("--timeout", 30) * 1000));
  auto started = Clock::now();
  auto deadline = started + timeout;

  Connector connector(ConnectorOptions::from_environment());
  auto channel = services::make_channel(args);
  auto metadata =
      args.has("--wait") ? channel->wait_for(name, timeout) : channel->fetch(name, timeout);
  auto pause = milliseconds(5);
  for (int attempt = 1;; ++attempt) {
    if (metadata.operation_kind() != OperationKind::Read) {
      throw Error(ErrorCode::Pairing, "'" + name + "' is published for writing, not reading");
    }
    std::vector<std::byte> buffer(metadata.total_size());
    try {
      auto transport = read_once(connector, metadata, buffer, name, deadline);
      write_file(out, buffer);
      auto took = Clock::now() - started;
      std::cout << "got " << name << " " << buffer.size() << " bytes via " << transport << " in "
                << std::chrono::duration<double>(took).count() << " s ("
                << Progress::rate(buffer.size(), took) << ") -> " << out << std::endl;
      return 0;
    } catch (const Error& e) {
      // `memwire serve --count N` publishes NAME again after each read: a reader that fetched
      // just before may find that memory consumed. Look again (briefly, a bounded number of
      // times) for NAME to point at new memory; any other failure stands.
      bool consumed = e.code() == ErrorCode::AccessDenied || e.code() == ErrorCode::NotFound ||
                      e.code() == ErrorCode::Cancelled || e.code() == ErrorCode::Expired;
      if (!consumed || attempt >= kAttempts) throw;
      for (;;) {
        if (left_until(deadline) <= pause) throw;
        // A deliberate pause before looking again: the server is republishing right now.
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, milliseconds(200));
        auto again = channel->fetch(name, left_until(deadline));
        if (again.notification_key() != metadata.notification_key()) {
          metadata = std::move(again);
          break;
        }
      }
    }
  }
}

}  // namespace memwire::cli
