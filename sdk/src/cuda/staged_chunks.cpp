#include "cuda/staged_chunks.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace memwire::detail {

bool StagedChunks::enabled() {
  static const bool on = [] {
    const char* text = std::getenv("MEMWIRE_CUDA_OVERLAP");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  return on;
}

StagedChunks::StagedChunks(const CudaDriver& driver, int ordinal, std::vector<Descriptor> device,
                           std::vector<Descriptor> host)
    : driver_(driver), ordinal_(ordinal), device_(std::move(device)), host_(std::move(host)) {
  driver_.use_device(ordinal_);
  stream_ = driver_.create_stream();
}

StagedChunks::~StagedChunks() {
  settle();
  for (const auto& chunk : to_host_) driver_.destroy_event(chunk.event);
  for (auto* event : to_device_) driver_.destroy_event(event);
  driver_.destroy_stream(stream_);
}

void StagedChunks::settle() const noexcept {
  try {
    driver_.use_device(ordinal_);
    driver_.wait(stream_);
  } catch (...) {  // a broken context: nothing is left to wait for
  }
}

std::vector<CopyRun> StagedChunks::runs_of(const std::byte* from, const std::byte* to,
                                           bool to_device) const {
  std::vector<CopyRun> runs;
  for (std::size_t i = 0; i < host_.size(); ++i) {
    const auto* begin = static_cast<const std::byte*>(host_[i].ptr());
    const auto* end = begin + host_[i].size();
    const auto* first = std::max(begin, from);
    const auto* last = std::min(end, to);
    if (first >= last) continue;
    auto* host = const_cast<std::byte*>(first);
    auto* device = static_cast<std::byte*>(device_[i].ptr()) + (first - begin);
    const auto length = static_cast<std::size_t>(last - first);
    runs.push_back(to_device ? CopyRun{device, host, length} : CopyRun{host, device, length});
  }
  return runs;
}

CudaDriver::Event StagedChunks::queue(const std::vector<CopyRun>& runs) {
  for (const auto& run : runs) driver_.copy_async(run.to, run.from, run.length, stream_);
  auto* event = driver_.create_event();
  try {
    driver_.record(event, stream_);
  } catch (...) {
    driver_.destroy_event(event);
    throw;
  }
  return event;
}

void StagedChunks::queue_to_host() {
  std::lock_guard lock(mutex_);
  if (host_.empty()) return;
  driver_.use_device(ordinal_);
  const auto* begin = static_cast<const std::byte*>(host_.front().ptr());
  const auto* end = static_cast<const std::byte*>(host_.back().ptr()) + host_.back().size();
  std::vector<Chunk> chunks;
  try {
    for (const auto* from = begin; from < end;) {
      const auto* to = from + std::min<std::size_t>(kChunk, static_cast<std::size_t>(end - from));
      chunks.push_back({to, queue(runs_of(from, to, false))});
      from = to;
    }
  } catch (...) {
    settle();
    for (const auto& chunk : chunks) driver_.destroy_event(chunk.event);
    throw;
  }
  to_host_ = std::move(chunks);
}

void StagedChunks::wait_to_host(const std::byte* host, std::size_t length) const {
  CudaDriver::Event event = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (to_host_.empty()) return;
    if (host == nullptr) {
      event = to_host_.back().event;
    } else {
      // The first chunk that ends at or past the range's end: its event covers every earlier one.
      const auto* end = host + length;
      auto found =
          std::lower_bound(to_host_.begin(), to_host_.end(), end,
                           [](const Chunk& chunk, const std::byte* at) { return chunk.end < at; });
      event = (found == to_host_.end() ? to_host_.back() : *found).event;
    }
  }
  driver_.use_device(ordinal_);
  driver_.wait_event(event);
}

std::size_t StagedChunks::queue_to_device(const std::byte* host, std::size_t length) {
  auto runs = runs_of(host, host + length, true);
  if (runs.empty()) return 0;
  std::size_t bytes = 0;
  for (const auto& run : runs) bytes += run.length;
  std::lock_guard lock(mutex_);
  driver_.use_device(ordinal_);
  to_device_.push_back(queue(runs));
  return bytes;
}

void StagedChunks::wait_to_device() {
  std::vector<CudaDriver::Event> events;
  {
    std::lock_guard lock(mutex_);
    events = to_device_;
  }
  driver_.use_device(ordinal_);
  for (auto* event : events) driver_.wait_event(event);
}

}  // namespace memwire::detail
