#pragma once

// Small helpers every benchmark program shares: sample statistics, the process's memory figures
// from /proc, page-backed buffers that really leave the process when freed, and argument lists.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace memwire::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Order statistics of a set of samples. Quantiles take the sample at index q * (n - 1), the same
// rule the sideband's nats_fetch_latency uses, so figures from both programs compare.
struct Summary {
  double median = 0, min = 0, max = 0, p90 = 0, p99 = 0;
  std::size_t count = 0;
};

inline Summary summarize(std::vector<double> samples) {
  Summary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1))];
  };
  summary.median = at(0.5);
  summary.p90 = at(0.9);
  summary.p99 = at(0.99);
  summary.min = samples.front();
  summary.max = samples.back();
  summary.count = samples.size();
  return summary;
}

// Microseconds per call of `call`: `warmups` calls unmeasured (connections, caches), then
// `iterations` timed one by one.
template <class Call>
Summary latency_us(int iterations, int warmups, Call&& call) {
  for (int i = 0; i < warmups; ++i) call();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    call();
    samples.push_back(seconds_since(start) * 1e6);
  }
  return summarize(std::move(samples));
}

// What a benchmark does with the value of each of its options ("--key value").
using OptionHandlers = std::map<std::string, std::function<void(const std::string& value)>>;

// Hands each "--key value" pair of the command line to its key's handler (a last key without a
// value is passed over). False, having said so on stderr as `program`, at a key it has none for.
inline bool parse_options(int argc, char** argv, const char* program,
                          const OptionHandlers& handlers) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const auto handler = handlers.find(key);
    if (handler == handlers.end()) {
      std::fprintf(stderr, "%s: unknown option %s\n", program, key.c_str());
      return false;
    }
    handler->second(argv[i + 1]);
  }
  return true;
}

// --iterations N: at least 10.
inline int iterations_of(const std::string& value) { return std::max(10, std::stoi(value)); }

// The latency benchmarks' options: --iterations N (at least 10) and, for those over NATS,
// --nats URL (none: they start a private server).
struct LatencyOptions {
  int iterations = 2000;
  std::string nats_url;
};

// A latency benchmark's main: reads its options (`with_nats`: --nats too), then runs `body`. A
// bad command line exits 2; an exception, printed as `program`'s, exits 1.
inline int latency_main(int argc, char** argv, const char* program, bool with_nats,
                        const std::function<void(LatencyOptions&)>& body) {
  LatencyOptions options;
  OptionHandlers handlers{{"--iterations", [&](const std::string& value) {
                             options.iterations = iterations_of(value);
                           }}};
  if (with_nats) handlers["--nats"] = [&](const std::string& value) { options.nats_url = value; };
  if (!parse_options(argc, argv, program, handlers)) return 2;
  try {
    body(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", program, error.what());
    return 1;
  }
  return 0;
}

// One "Vm..." line of /proc/<pid>/status, in KiB; 0 when absent.
inline std::uint64_t proc_status_kb(const std::string& field, const std::string& pid = "self") {
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, field.size(), field) == 0 && line.size() > field.size() &&
        line[field.size()] == ':') {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

// VmHWM and VmRSS of this process, in KiB, from one read of /proc/self/status (no stream): what
// a peer reports after each batch, often while other peers' transfers still run, so it costs
// them as little CPU as it can (two ifstream reads took ~50 us here, this ~20 us).
struct PeakAndResident {
  std::uint64_t hwm_kb = 0, rss_kb = 0;
};
inline PeakAndResident peak_and_resident() {
  char text[16384];
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t length = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (length <= 0) return {};
  text[length] = '\0';
  auto field = [&](const char* line_start) -> std::uint64_t {
    const char* at = std::strstr(text, line_start);
    return at ? std::strtoull(at + std::strlen(line_start), nullptr, 10) : 0;
  };
  return {field("\nVmHWM:"), field("\nVmRSS:")};
}

// CPU time a process's live threads have run, in seconds (/proc/PID/task/*/schedstat: nanoseconds,
// unlike /proc/PID/stat's 10 ms ticks). Threads that ended meanwhile are not counted: the figures
// here come from pooled connections, whose threads live on.
inline double process_cpu_seconds(const std::string& pid = "self") {
  double total = 0;
  std::error_code ignored;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + pid + "/task", ignored)) {
    std::ifstream schedstat(task.path() / "schedstat");
    std::uint64_t ns = 0;
    if (schedstat >> ns) total += static_cast<double>(ns) / 1e9;
  }
  return total;
}

// Scattered layouts (a gap between descriptors, as in a KV cache) fill and check each descriptor
// with a pattern of its own, so that a block landing in the wrong place shows.
inline std::uint64_t descriptor_seed(std::uint64_t seed, unsigned descriptor) {
  return seed * 65537 + descriptor + 1;
}

// Resets VmHWM to the current VmRSS (Linux >= 4.0), so the peak of one configuration is not the
// peak of an earlier, larger one.
inline void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

// Anonymous pages from mmap: freed memory goes straight back to the kernel (RSS falls), unlike
// small heap blocks a malloc arena may keep.
class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(std::size_t size) : size_(size) {
    if (size == 0) return;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of " + std::to_string(size) + " bytes");
    data_ = static_cast<std::byte*>(p);
  }
  ~PageBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  PageBuffer(PageBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PageBuffer& operator=(PageBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// "4K,64K,1M" -> bytes; K, M, G are powers of 1024.
inline std::vector<std::size_t> parse_sizes(const std::string& list) {
  std::vector<std::size_t> sizes;
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    char* end = nullptr;
    std::size_t value = std::strtoull(item.c_str(), &end, 10);
    switch (*end) {
      case 'G':
      case 'g':
        value <<= 10;
        [[fallthrough]];
      case 'M':
      case 'm':
        value <<= 10;
        [[fallthrough]];
      case 'K':
      case 'k':
        value <<= 10;
        break;
      case '\0':
        break;
      default:
        throw std::invalid_argument("bad size '" + item + "'");
    }
    sizes.push_back(value);
  }
  return sizes;
}

inline std::vector<std::string> split(const std::string& list, char separator = ',') {
  std::vector<std::string> items;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, separator)) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

}  // namespace memwire::bench
