#include "cuda/cuda_copies.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "cuda/kernel_copies.hpp"

namespace memwire::detail {
namespace {

// A stream the thread that made it owns: never shared, so waiting on it waits for this
// thread's copies alone; with the device buffers its kernel launches use.
class OwnStream {
 public:
  OwnStream(const CudaDriver& driver, int ordinal)
      : driver_(driver), table(driver), scratch(driver) {
    driver_.use_device(ordinal);
    stream_ = driver_.create_stream();
  }
  ~OwnStream() { driver_.destroy_stream(stream_); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  CudaDriver::Stream get() const noexcept { return stream_; }

 private:
  const CudaDriver& driver_;
  CudaDriver::Stream stream_ = nullptr;

 public:
  DeviceBuffer table;    // the kernel's run table
  DeviceBuffer scratch;  // device <-> host runs, gathered or scattered on the device
};

OwnStream& thread_stream(const CudaDriver& driver, int ordinal) {
  thread_local std::map<int, OwnStream> streams;
  auto found = streams.find(ordinal);
  if (found == streams.end()) found = streams.try_emplace(ordinal, driver, ordinal).first;
  return found->second;
}

// Runs at least this many, of at most this many bytes on average, go through the kernel; a
// device <-> host request through it when its host bytes span at most kMostScratch.
constexpr std::size_t kKernelFrom = 2;
constexpr std::size_t kKernelAverageBelow = 1 << 20;
constexpr std::size_t kMostScratch = std::size_t{64} << 20;

void copy_one_by_one(const CudaDriver& driver, std::span<const CopyRun> runs,
                     CudaDriver::Stream stream) {
  if (runs.size() > 1) {
    std::vector<CudaDriver::DevicePointer> to, from;
    std::vector<std::size_t> sizes;
    to.reserve(runs.size());
    from.reserve(runs.size());
    sizes.reserve(runs.size());
    for (const auto& run : runs) {
      to.push_back(reinterpret_cast<CudaDriver::DevicePointer>(run.to));
      from.push_back(reinterpret_cast<CudaDriver::DevicePointer>(run.from));
      sizes.push_back(run.length);
    }
    if (driver.copy_batch_async(to.data(), from.data(), sizes.data(), runs.size(), stream)) return;
  }
  // One by one (no batches here, or the driver refused this one: the runs are copied again,
  // whole, so a partly queued batch leaves nothing wrong behind).
  for (const auto& run : runs) driver.copy_async(run.to, run.from, run.length, stream);
}

// Device <-> host runs through the kernel: the device side gathered into (or scattered from) a
// scratch buffer laid out as the host bytes are, which move with one copy per stretch of
// consecutive host bytes. False when the host bytes overlap or span too much.
bool copy_through_scratch(const CudaDriver& driver, const CopyKernel& kernel, OwnStream& own,
                          std::span<const CopyRun> runs, bool to_host) {
  auto host_of = [to_host](const CopyRun& run) {
    return static_cast<const std::byte*>(to_host ? run.to : run.from);
  };
  std::vector<const CopyRun*> sorted;
  sorted.reserve(runs.size());
  for (const auto& run : runs)
    if (run.length > 0) sorted.push_back(&run);
  if (sorted.empty()) return true;
  std::sort(sorted.begin(), sorted.end(),
            [&](const CopyRun* a, const CopyRun* b) { return host_of(*a) < host_of(*b); });
  const auto* low = host_of(*sorted.front());
  const std::byte* end = low;
  for (const auto* run : sorted) {
    if (host_of(*run) < end) return false;  // overlapping host bytes: copy them in order
    end = host_of(*run) + run->length;
  }
  const auto span = static_cast<std::size_t>(end - low);
  if (span > kMostScratch) return false;
  auto* scratch = own.scratch.reserve(span);
  std::vector<CopyRun> device_runs;
  device_runs.reserve(sorted.size());
  for (const auto* run : sorted) {
    auto* staged = scratch + (host_of(*run) - low);
    device_runs.push_back(to_host ? CopyRun{staged, run->from, run->length}
                                  : CopyRun{run->to, staged, run->length});
  }
  // Stretches of consecutive host bytes, each one copy.
  std::vector<CopyRun> stretches;
  for (std::size_t i = 0; i < sorted.size();) {
    const auto* first = host_of(*sorted[i]);
    std::size_t length = sorted[i]->length;
    for (++i; i < sorted.size() && host_of(*sorted[i]) == first + length; ++i)
      length += sorted[i]->length;
    auto* staged = scratch + (first - low);
    auto* host = const_cast<std::byte*>(first);
    stretches.push_back(to_host ? CopyRun{host, staged, length} : CopyRun{staged, host, length});
  }
  if (!to_host) copy_one_by_one(driver, stretches, own.get());
  kernel.launch(device_runs, own.table, own.get());
  if (to_host) copy_one_by_one(driver, stretches, own.get());
  return true;
}

bool copy_with_kernel(const CudaDriver& driver, int ordinal, OwnStream& own,
                      std::span<const CopyRun> runs, CopyDirection direction) {
  if (direction == CopyDirection::Unknown || runs.size() < kKernelFrom) return false;
  std::size_t total = 0;
  for (const auto& run : runs) total += run.length;
  if (total / runs.size() >= kKernelAverageBelow) return false;
  const auto& kernel = CopyKernel::of(driver, ordinal);
  if (!kernel.available()) return false;
  if (direction == CopyDirection::DeviceToDevice) {
    kernel.launch(runs, own.table, own.get());
    return true;
  }
  return copy_through_scratch(driver, kernel, own, runs, direction == CopyDirection::DeviceToHost);
}

}  // namespace

void copy_runs(const CudaDriver& driver, int ordinal, std::span<const CopyRun> runs,
               CopyDirection direction) {
  if (runs.empty()) return;
  driver.use_device(ordinal);
  auto& own = thread_stream(driver, ordinal);
  if (!copy_with_kernel(driver, ordinal, own, runs, direction))
    copy_one_by_one(driver, runs, own.get());
  driver.wait(own.get());
}

std::string copy_path(const CudaDriver& driver, int ordinal) {
  driver.use_device(ordinal);
  const auto& kernel = CopyKernel::of(driver, ordinal);
  return kernel.available() ? "kernel" : kernel.unavailable_reason();
}

}  // namespace memwire::detail
