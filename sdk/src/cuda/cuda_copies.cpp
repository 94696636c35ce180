#include "cuda/cuda_copies.hpp"

#include <map>

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
  for (const auto& run : runs) driver.copy_async(run.to, run.from, run.length, stream);
  driver.wait(stream);
}

}  // namespace memwire::detail
