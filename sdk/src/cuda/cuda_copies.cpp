#include "cuda/cuda_copies.hpp"

#include <map>
#include <vector>

#include "cuda/cuda_driver.hpp"

namespace memwire::detail {
namespace {

// A stream the thread that made it owns: never shared, so waiting on it waits for this
// thread's copies alone.
class OwnStream {
 public:
  OwnStream(const CudaDriver& driver, int ordinal) : driver_(driver) {
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
};

CudaDriver::Stream thread_stream(const CudaDriver& driver, int ordinal) {
  thread_local std::map<int, OwnStream> streams;
  auto found = streams.find(ordinal);
  if (found == streams.end()) found = streams.try_emplace(ordinal, driver, ordinal).first;
  return found->second.get();
}

}  // namespace

void copy_runs(const CudaDriver& driver, int ordinal, std::span<const CopyRun> runs) {
  if (runs.empty()) return;
  driver.use_device(ordinal);
  const auto stream = thread_stream(driver, ordinal);
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
    if (driver.copy_batch_async(to.data(), from.data(), sizes.data(), runs.size(), stream))
      return driver.wait(stream);
  }
  // One by one (no batches here, or the driver refused this one: the runs are copied again,
  // whole, so a partly queued batch leaves nothing wrong behind).
  for (const auto& run : runs) driver.copy_async(run.to, run.from, run.length, stream);
  driver.wait(stream);
}

}  // namespace memwire::detail
