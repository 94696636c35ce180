// The passive side of the transfer benchmark: a second OS process that the driver
// (transfer_bench) spawns, with commands on stdin and answers on stdout, one line each.
//
//   transfer_peer --transport NAME [--memory plain|shared]
//     (shared: the buffers are one memwire::SharedBuffer, which same-host peers map)
//     -> "ready <transports>"  or  "unavailable <reason>" (then exits)
//   alloc SIZE DESCS SLOTS SEED [GAP]  SLOTS buffers of SIZE bytes, each split into DESCS
//                                 descriptors GAP x their size apart (default 1: contiguous),
//                                 filled with the pattern of SEED (0: zeros)
//     -> "ok <VmRSS kB>"          after the fill; the peak RSS is reset to it
//   publish readable|writable COUNT all|each
//     -> COUNT lines of metadata JSON (operation i on buffer i % SLOTS); then, with "each",
//        "c" as each operation completes; finally "done <errors> <VmHWM kB> <VmRSS kB> [reason]"
//   verify SEED                   -> "ok", or "buffer S of N, byte B": the first that differs
//                                 from the pattern
//   quit (or end of input)
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "memwire/memwire.hpp"
#include "slot_layout.hpp"
#include "support/pattern.hpp"

namespace {

using namespace memwire;
using memwire::bench::PageBuffer;

// Lines go out with write(2): completion callbacks on memwire's progress thread and the main
// thread both write, and stdio buffering would hold "c" back from the driver that times it.
std::mutex output_mutex;

void say(const std::string& line) {
  std::lock_guard lock(output_mutex);
  std::string data = line + "\n";
  const char* cursor = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, cursor, left);
    if (n <= 0) std::_Exit(3);  // the driver is gone: nothing left to report to
    cursor += n;
    left -= static_cast<std::size_t>(n);
  }
}

struct Buffers {
  bool use_shared = false;
  PageBuffer plain;
  std::optional<SharedBuffer> shared;
  bench::SlotLayout layout;

  void allocate(std::size_t slot_size, unsigned descs, unsigned slot_count, std::uint64_t seed,
                unsigned gap_factor) {
    const unsigned gap = std::max(1u, gap_factor);
    plain = PageBuffer();  // the old buffers leave before the new ones arrive
    shared.reset();
    layout = {};
    std::byte* memory = nullptr;
    if (use_shared) {
      memory = shared.emplace(slot_size * slot_count * gap).data();
    } else {
      plain = PageBuffer(slot_size * slot_count * gap);
      memory = plain.data();
    }
    layout = bench::SlotLayout(memory, slot_size, descs, slot_count, seed, gap);
  }

  // "ok" when every buffer holds the pattern of `seed`; else where it first does not.
  std::string damage(std::uint64_t seed) const {
    auto where = layout.damage(seed);
    return where.empty() ? "ok" : where;
  }
};

// Counts completions of one batch; the last one wakes the main thread.
struct Batch {
  std::mutex mutex;
  std::condition_variable done;
  std::size_t remaining = 0;
  bool each = false;
};

template <class Op>
void finish_batch(std::vector<Op>& operations, const std::shared_ptr<Batch>& batch) {
  {
    std::unique_lock lock(batch->mutex);
    batch->done.wait_for(lock, std::chrono::minutes(5), [&] { return batch->remaining == 0; });
  }
  std::size_t errors = 0;
  std::string reason;
  for (auto& operation : operations) {
    if (operation.status() != OperationStatus::Complete) {
      ++errors;
      if (reason.empty()) {
        reason = operation.error_message().empty() ? std::string(to_string(operation.status()))
                                                   : operation.error_message();
      }
    }
  }
  operations.clear();  // unfinished ones are cancelled and revoked here
  const auto memory = bench::peak_and_resident();
  say("done " + std::to_string(errors) + " " + std::to_string(memory.hwm_kb) + " " +
      std::to_string(memory.rss_kb) + (reason.empty() ? "" : " " + reason));
}

template <class Op, class Create>
void publish(Buffers& buffers, std::size_t count, bool each, Create create) {
  auto batch = std::make_shared<Batch>();
  batch->remaining = count;
  batch->each = each;
  std::vector<Op> operations;
  operations.reserve(count);
  std::string lines;
  for (std::size_t i = 0; i < count; ++i) {
    operations.push_back(create(buffers.layout.slots[i % buffers.layout.slots.size()]));
    lines += operations.back().metadata().to_json();
    lines += '\n';
  }
  lines.pop_back();
  say(lines);
  for (auto& operation : operations) {
    operation.on_complete([batch](OperationStatus) {
      if (batch->each) say("c");
      std::lock_guard lock(batch->mutex);
      if (--batch->remaining == 0) batch->done.notify_one();
    });
  }
  finish_batch(operations, batch);
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "tcp";
  Buffers buffers;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--transport") transport = argv[i + 1];
    if (std::string(argv[i]) == "--memory")
      buffers.use_shared = std::string(argv[i + 1]) == "shared";
  }
  std::unique_ptr<Connector> connector;
  try {
    // MEMWIRE_TCP_CHUNK_SIZE and friends may tune the run; the transport is the driver's choice.
    auto options = ConnectorOptions::from_environment();
    options.transports = {transport};
    connector = std::make_unique<Connector>(options);
  } catch (const std::exception& error) {
    say("unavailable " + std::string(error.what()));
    return 0;
  }
  std::string started;
  for (const auto& name : connector->transports()) started += (started.empty() ? "" : ",") + name;
  say("ready " + started);

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream command(line);
    std::string verb;
    command >> verb;
    try {
      if (verb == "alloc") {
        std::size_t size = 0;
        unsigned descs = 1, slots = 1;
        std::uint64_t seed = 0;
        unsigned gap = 1;
        command >> size >> descs >> slots >> seed;
        if (!(command >> gap)) gap = 1;
        buffers.allocate(size, descs, slots, seed, gap);
        // RSS before the reset: the new peak then starts at or above it.
        const auto rss = bench::proc_status_kb("VmRSS");
        bench::reset_peak_rss();
        say("ok " + std::to_string(rss));
      } else if (verb == "publish") {
        std::string kind, mode;
        std::size_t count = 0;
        command >> kind >> count >> mode;
        if (kind == "readable") {
          publish<ReadableOperation>(buffers, count, mode == "each", [&](const auto& descs) {
            return connector->create_readable(descs);
          });
        } else {
          publish<WritableOperation>(buffers, count, mode == "each", [&](const auto& descs) {
            return connector->create_writable(descs);
          });
        }
      } else if (verb == "verify") {
        std::uint64_t seed = 0;
        command >> seed;
        say(buffers.damage(seed));
      } else if (verb == "quit") {
        break;
      } else {
        say("error unknown command '" + verb + "'");
      }
    } catch (const std::exception& error) {
      say("error " + std::string(error.what()));
    }
  }
  return 0;
}
