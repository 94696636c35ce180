// memwire-wire-probe: a bounded by-name transfer driver for the two-guest lab. One process
// produces names (readable: published for reading; writable: served, written on request), the
// other consumes them, each transfer byte-for-byte checked, and each side ends with one summary
// line of verdict counts:
//   probe-summary role=R attempted=A completed=C failed=F hung=H wrong=W transport=T ...
// A transfer that does not return within its timeout plus a grace period counts as hung: the
// watchdog prints the summary and ends the process (exit 3). Wrong bytes or hung: exit 1 or 3.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/arguments.hpp"
#include "common/channel_options.hpp"
#include "common/exit_codes.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/worker.hpp"

namespace {

using namespace memwire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kHelp =
    R"(usage: memwire-wire-probe produce|consume (--http URL | --nats URL) [options]
  --mode M         produce: readable|writable; consume: read|request (pairs with the producer)
  --prefix P       names are P.t<i> (default probe)
  --count N        transfers 0..N-1 (default 8)
  --sizes LIST     bytes per name, comma-separated, cycled over the names (default 1048576)
  --timeout S      per-transfer deadline in seconds (default 20); hung = not back by S + 10
  --settle S       after a failed transfer, watch the target this long for late writes (default 1)
)";

constexpr auto kGrace = std::chrono::seconds(10);

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The bytes of transfer `index`: distinct per name and per position, made 8 at a time (a
// 32 MiB buffer must fill in well under a second under TCG).
std::uint64_t expected_word(std::uint64_t index, std::size_t word) {
  return mix((index << 40) ^ word);
}

void fill(std::vector<std::uint8_t>& bytes, std::uint64_t index) {
  for (std::size_t at = 0; at < bytes.size(); at += 8) {
    const auto word = expected_word(index, at / 8);
    std::memcpy(bytes.data() + at, &word, std::min<std::size_t>(8, bytes.size() - at));
  }
}

// First wrong position, or -1.
long long first_mismatch(const std::vector<std::uint8_t>& bytes, std::uint64_t index) {
  for (std::size_t at = 0; at < bytes.size(); at += 8) {
    const auto word = expected_word(index, at / 8);
    const auto length = std::min<std::size_t>(8, bytes.size() - at);
    if (std::memcmp(bytes.data() + at, &word, length) != 0) {
      for (std::size_t i = 0; i < length; ++i)
        if (bytes[at + i] != reinterpret_cast<const std::uint8_t*>(&word)[i])
          return static_cast<long long>(at + i);
    }
  }
  return -1;
}

std::uint64_t checksum(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t sum = 0;
  for (std::size_t at = 0; at < bytes.size(); at += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + at, std::min<std::size_t>(8, bytes.size() - at));
    sum = mix(sum ^ word);
  }
  return sum;
}

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> sizes;
  std::istringstream in(text);
  for (std::string word; std::getline(in, word, ',');) {
    std::size_t used = 0;
    unsigned long long value = 0;
    try {
      value = std::stoull(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || value == 0 || value > (256ULL << 20))
      throw services::UsageError("--sizes wants byte counts in 1..256 MiB, got '" + word + "'");
    sizes.push_back(value);
  }
  if (sizes.empty()) throw services::UsageError("--sizes is empty");
  return sizes;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The verdict counts, printed once (by the main thread or by the watchdog).
class Verdict {
 public:
  explicit Verdict(std::string role) : role_(std::move(role)) {}

  void attempted() {
    add([&] { ++attempted_; });
  }
  void completed(const std::string& transport, std::size_t bytes, double ms) {
    add([&] {
      ++completed_;
      transports_[transport.empty() ? "?" : transport]++;
      bytes_ += bytes;
      transfer_ms_ += ms;
    });
  }
  void failed(std::string_view code, double notice_ms) {
    add([&] {
      ++failed_;
      codes_[std::string(code)]++;
      first_notice_ms_ = std::min(first_notice_ms_, notice_ms);
    });
  }
  void wrong() {
    add([&] { ++wrong_; });
  }
  int wrong_count() {
    std::lock_guard lock(mutex_);
    return wrong_;
  }

  // Prints the summary line; only the first call prints.
  void print(int hung) {
    std::lock_guard lock(mutex_);
    if (printed_) return;
    printed_ = true;
    std::ostringstream line;
    line << std::fixed << std::setprecision(1) << "probe-summary role=" << role_
         << " attempted=" << attempted_ << " completed=" << completed_ << " failed=" << failed_
         << " hung=" << hung << " wrong=" << wrong_ << " transport=";
    if (transports_.empty()) line << "none";
    for (auto it = transports_.begin(); it != transports_.end(); ++it)
      line << (it == transports_.begin() ? "" : "+") << it->first;
    line << " codes=";
    if (codes_.empty()) line << "none";
    for (auto it = codes_.begin(); it != codes_.end(); ++it)
      line << (it == codes_.begin() ? "" : ",") << it->first << ":" << it->second;
    line << " bytes=" << bytes_ << " mib_s=";
    if (transfer_ms_ > 0)
      line << static_cast<double>(bytes_) / (1 << 20) / (transfer_ms_ / 1000);
    else
      line << 0;
    line << " first-error-ms=";
    if (failed_ > 0)
      line << first_notice_ms_;
    else
      line << "none";
    std::cout << line.str() << std::endl;
  }

 private:
  template <typename F>
  void add(F change) {
    std::lock_guard lock(mutex_);
    change();
  }

  std::mutex mutex_;
  std::string role_;
  bool printed_ = false;
  int attempted_ = 0, completed_ = 0, failed_ = 0, wrong_ = 0;
  std::map<std::string, int> transports_, codes_;
  std::uint64_t bytes_ = 0;
  double transfer_ms_ = 0;
  double first_notice_ms_ = 1e18;
};

// Where each thread of this process waits (its name, kernel wait channel and kernel stack):
// printed when a call hung, so a CI log tells a wedged progress thread from a lost event.
void print_thread_states() {
  auto first_line = [](const std::filesystem::path& file) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    return line;
  };
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::cout << "probe: thread " << task.path().filename().string() << " "
              << first_line(task.path() / "comm") << " wchan=" << first_line(task.path() / "wchan")
              << std::endl;
    std::ifstream stack(task.path() / "stack");
    for (std::string frame; std::getline(stack, frame);)
      std::cout << "probe:   " << frame << std::endl;
  }
}

// Ends the process with hung=1 when the call it watches does not return by its deadline.
class Watchdog {
 public:
  explicit Watchdog(Verdict& verdict) : verdict_(verdict), thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  void arm(Clock::time_point deadline, std::string what) {
    std::lock_guard lock(mutex_);
    deadline_ = deadline + kGrace;
    what_ = std::move(what);
    changed_.notify_all();
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    deadline_.reset();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (!deadline_) {
        changed_.wait(lock);
        continue;
      }
      auto deadline = *deadline_;
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && deadline_ &&
          *deadline_ == deadline) {
        std::cout << "probe: HUNG " << what_ << " did not return by its deadline + "
                  << kGrace.count() << " s" << std::endl;
        print_thread_states();
        verdict_.print(1);
        std::_Exit(3);
      }
    }
  }

  Verdict& verdict_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Clock::time_point> deadline_;
  std::string what_;
  bool stopping_ = false;
  std::thread thread_;
};

struct Plan {
  std::string prefix;
  std::uint64_t count;
  std::vector<std::size_t> sizes;
  milliseconds timeout;
  milliseconds settle;

  std::string name(std::uint64_t i) const { return prefix + ".t" + std::to_string(i); }
  std::size_t size(std::uint64_t i) const { return sizes[i % sizes.size()]; }
};

std::string code_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return std::string(to_string(e.code()));
  } catch (...) {
    return "unclassified";
  }
}

// The message alone: the verdict line prints the code before it.
std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const memwire::Error& e) {
    return std::string(e.message());
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "?";
  }
}

// Producer, readable: publishes every name, then waits for each to be read. Its buffers must
// never change (a remote may only read them).
int produce_readable(sideband::Worker& worker, const Plan& plan, Verdict& verdict,
                     Watchdog& watchdog) {
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<std::uint64_t> sums;
  std::vector<sideband::Lease> leases;
  for (std::uint64_t i = 0; i < plan.count; ++i) {
    buffers.emplace_back(plan.size(i));
    fill(buffers.back(), i);
    sums.push_back(checksum(buffers.back()));
    leases.push_back(worker.publish(plan.name(i), {Descriptor(std::span(buffers.back()))}));
  }
  std::cout << "probe: ready, published " << plan.count << " names" << std::endl;
  auto started = Clock::now();
  for (std::uint64_t i = 0; i < plan.count; ++i) {
    verdict.attempted();
    // The consumer reads in order; each name gets the per-transfer timeout after the previous.
    auto deadline = Clock::now() + plan.timeout;
    watchdog.arm(deadline, "lease " + plan.name(i));
    try {
      auto status = leases[i].wait(plan.timeout);
      watchdog.disarm();
      if (status == OperationStatus::Complete) {
        verdict.completed(leases[i].operation().transport(), plan.size(i), 0);
        std::cout << "probe: read " << plan.name(i) << " via " << leases[i].operation().transport()
                  << std::endl;
      } else {
        verdict.failed("Cancelled", ms_between(started, Clock::now()));
        std::cout << "probe: error " << plan.name(i) << " Cancelled" << std::endl;
      }
    } catch (...) {
      watchdog.disarm();
      auto error = std::current_exception();
      verdict.failed(code_of(error), ms_between(started, Clock::now()));
      std::cout << "probe: error " << plan.name(i) << " " << code_of(error) << ": "
                << message_of(error) << std::endl;
    }
  }
  leases.clear();
  for (std::uint64_t i = 0; i < plan.count; ++i) {
    if (checksum(buffers[i]) != sums[i]) {
      verdict.wrong();
      std::cout << "probe: WRONG the published buffer of " << plan.name(i) << " changed"
                << std::endl;
    }
  }
  std::cout << "probe: published buffers checked after the run" << std::endl;
  return 0;
}

// Producer, writable: serves requests under the prefix until `count` writes were done, or
// the deadline after the last one passes.
int produce_writable(sideband::Worker& worker, const Plan& plan, Verdict& verdict) {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t written = 0;
  sideband::Worker::ServeOptions options;
  options.write_timeout = plan.timeout;
  options.on_written = [&](const std::string& name, const WriteOperation& write) {
    std::lock_guard lock(mutex);
    ++written;
    std::cout << "probe: wrote " << name << " via " << write.transport() << std::endl;
    verdict.completed(write.transport(), 0, 0);
    changed.notify_all();
  };
  auto subscription = worker.serve(
      plan.prefix,
      [&](const std::string& name) {
        verdict.attempted();
        const auto dot = plan.prefix.size() + 2;  // "<prefix>.t"
        std::uint64_t index = std::stoull(name.substr(dot));
        auto bytes = std::make_shared<std::vector<std::uint8_t>>(plan.size(index));
        fill(*bytes, index);
        std::cout << "probe: serving " << name << " (" << bytes->size() << " B)" << std::endl;
        return sideband::ServedData{{Descriptor(std::span(*bytes))}, bytes};
      },
      options);
  std::cout << "probe: ready, serving " << plan.prefix << ".t<i>" << std::endl;
  std::unique_lock lock(mutex);
  std::uint64_t seen = 0;
  // Each write gets the per-transfer timeout after the previous one.
  while (written < plan.count) {
    if (!changed.wait_for(lock, plan.timeout, [&] { return written > seen; })) break;
    seen = written;
  }
  return 0;
}

// Consumer: reads (or requests) each name in turn into a zeroed buffer and checks it. After a
// failure the buffer is watched for `settle`: memory must not change once an error was given.
int consume(sideband::Worker& worker, const Plan& plan, bool request, Verdict& verdict,
            Watchdog& watchdog) {
  for (std::uint64_t i = 0; i < plan.count; ++i) {
    const auto name = plan.name(i);
    std::vector<std::uint8_t> target(plan.size(i), 0);
    verdict.attempted();
    std::cout << "probe: begin " << name << " " << target.size() << " B" << std::endl;
    const auto begin = Clock::now();
    const auto deadline = begin + plan.timeout;
    watchdog.arm(deadline, name);
    std::string transport;
    try {
      std::vector<Descriptor> local{Descriptor(std::span(target))};
      if (request) {
        // The producer may not serve yet: NotFound is retried within the deadline.
        for (auto pause = milliseconds(20);; pause = std::min(pause * 2, milliseconds(500))) {
          try {
            transport = worker.request(name, local, left_until(deadline)).transport();
            break;
          } catch (const Error& e) {
            if (e.code() != ErrorCode::NotFound || left_until(deadline) <= pause) throw;
          }
          std::this_thread::sleep_for(pause);
        }
      } else {
        transport = worker
                        .read(name, local, left_until(deadline),
                              sideband::Worker::Lookup::WaitUntilPublished)
                        .transport();
      }
      watchdog.disarm();
      const double took = ms_between(begin, Clock::now());
      if (auto bad = first_mismatch(target, i); bad >= 0) {
        verdict.wrong();
        std::cout << "probe: WRONG " << name << " byte " << bad << std::endl;
        continue;
      }
      verdict.completed(transport, target.size(), took);
      std::cout << std::fixed << std::setprecision(1) << "probe: done " << name << " "
                << target.size() << " B via " << transport << " in " << took << " ms ("
                << static_cast<double>(target.size()) / (1 << 20) / (took / 1000) << " MiB/s)"
                << std::endl;
    } catch (...) {
      watchdog.disarm();
      const double took = ms_between(begin, Clock::now());
      auto error = std::current_exception();
      verdict.failed(code_of(error), took);
      std::cout << std::fixed << std::setprecision(1) << "probe: error " << name << " after "
                << took << " ms: " << code_of(error) << ": " << message_of(error) << std::endl;
      // Memory given back with an error must stay as it is.
      auto before = checksum(target);
      std::this_thread::sleep_for(plan.settle);
      if (checksum(target) != before) {
        verdict.wrong();
        std::cout << "probe: WRONG " << name << " changed after its error" << std::endl;
      } else {
        std::cout << "probe: " << name << " unchanged for " << plan.settle.count()
                  << " ms after its error" << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Verdict> verdict;
  try {
    auto valued = services::channel_option_names();
    valued.insert({"--mode", "--prefix", "--count", "--sizes", "--timeout", "--settle"});
    services::Arguments args(argc, argv, 1, valued, {"--help"});
    if (args.has("--help") || args.positional().size() != 1) {
      std::cout << kHelp;
      return args.has("--help") ? 0 : 2;
    }
    const auto role = args.positional()[0];
    if (role != "produce" && role != "consume") throw services::UsageError("produce or consume");
    Plan plan{args.get("--prefix", "probe"), args.get_uint("--count", 8),
              parse_sizes(args.get("--sizes", "1048576")),
              args.get_seconds("--timeout", std::chrono::seconds(20)),
              args.get_seconds("--settle", std::chrono::seconds(1))};
    sideband::validate_name(plan.prefix);
    if (plan.count == 0 || plan.count > 1000) throw services::UsageError("--count in 1..1000");
    const auto mode = args.get("--mode", role == "produce" ? "readable" : "read");

    verdict.emplace(role == "produce" ? "producer" : "consumer");
    // Teardown (leases withdrawn, connections closed) is timed: after a fault it must not hang.
    Clock::time_point teardown;
    {
      Connector connector(ConnectorOptions::from_environment());
      auto channel = services::make_channel(args);
      sideband::Worker worker(connector, *channel);
      std::cout << "probe: " << role << " " << mode << " via " << services::channel_kind(args)
                << ", transports offered:";
      for (const auto& t : connector.transports()) std::cout << " " << t;
      std::cout << std::endl;
      Watchdog watchdog(*verdict);
      if (role == "produce" && mode == "readable") {
        produce_readable(worker, plan, *verdict, watchdog);
      } else if (role == "produce" && mode == "writable") {
        produce_writable(worker, plan, *verdict);
      } else if (role == "consume" && (mode == "read" || mode == "request")) {
        consume(worker, plan, mode == "request", *verdict, watchdog);
      } else {
        throw services::UsageError("--mode " + mode + " does not fit " + role);
      }
      verdict->print(0);
      teardown = Clock::now();
    }
    std::cout << std::fixed << std::setprecision(1) << "probe: teardown took "
              << ms_between(teardown, Clock::now()) << " ms" << std::endl;
    return verdict->wrong_count() > 0 ? 1 : 0;
  } catch (...) {
    if (verdict) verdict->print(0);
    return services::report_failure("memwire-wire-probe", std::current_exception());
  }
}
