#include "cuda/kernel_copies.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "memwire/error.hpp"

namespace memwire::detail {

extern const char kCopyRunsPtx[];  // generated (sdk/CMakeLists.txt); empty without nvcc

namespace {

// copy_runs.cu's CopyRunEntry, byte for byte.
struct CopyRunEntry {
  std::uint64_t from;
  std::uint64_t to;
  std::uint64_t length;
  std::uint64_t first_tile;
};
static_assert(sizeof(CopyRunEntry) == 32);

constexpr std::uint64_t kTileBytes = 16 * 1024;
constexpr unsigned kThreads = 256;  // copy_runs.cu's __launch_bounds__
constexpr std::uint64_t kMostBlocks = 2048;

bool wraps(const void* start, std::size_t length) {
  const auto address = reinterpret_cast<std::uintptr_t>(start);
  return address == 0 || length > UINTPTR_MAX - address;
}

}  // namespace

std::byte* DeviceBuffer::reserve(std::size_t size) {
  if (size <= size_) return static_cast<std::byte*>(data_);
  driver_.free_device(data_);
  data_ = nullptr;
  size_ = 0;
  const auto grown = std::max<std::size_t>(size, 64 * 1024);
  data_ = driver_.allocate_device(grown);
  size_ = grown;
  return static_cast<std::byte*>(data_);
}

CopyKernel::CopyKernel(const CudaDriver& driver, int ordinal) : driver_(driver) {
  if (const char* off = std::getenv("MEMWIRE_CUDA_COPY_KERNEL"); off != nullptr && *off == '0') {
    reason_ = "MEMWIRE_CUDA_COPY_KERNEL=0";
    return;
  }
  if (kCopyRunsPtx[0] == '\0') {
    reason_ = "this build has no GPU copy kernel (nvcc was not found when it was configured)";
    return;
  }
  try {
    driver_.use_device(ordinal);
    module_ = driver_.load_module(kCopyRunsPtx);
    function_ = driver_.function_of(module_, "memwire_copy_runs");
  } catch (const Error& error) {
    reason_ = std::string("the GPU copy kernel did not load: ") + error.what();
    function_ = nullptr;
  }
}

CopyKernel::~CopyKernel() { driver_.unload_module(module_); }

const CopyKernel& CopyKernel::of(const CudaDriver& driver, int ordinal) {
  static std::mutex mutex;
  // Kept for the life of the process, as the driver's primary contexts are.
  static auto& kernels = *new std::map<int, std::unique_ptr<CopyKernel>>();
  std::lock_guard lock(mutex);
  auto& kernel = kernels[ordinal];
  if (!kernel) kernel.reset(new CopyKernel(driver, ordinal));
  return *kernel;
}

void CopyKernel::launch(std::span<const CopyRun> runs, DeviceBuffer& table,
                        CudaDriver::Stream stream) const {
  if (!available()) throw Error(ErrorCode::Transport, reason_);
  thread_local std::vector<CopyRunEntry> entries;
  entries.clear();
  entries.reserve(runs.size());
  std::uint64_t tiles = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    if (run.length == 0) continue;
    if (wraps(run.from, run.length) || wraps(run.to, run.length))
      throw Error(ErrorCode::InvalidArgument, "copy run " + std::to_string(i) + " of " +
                                                  std::to_string(run.length) +
                                                  " bytes wraps around the address space");
    entries.push_back({reinterpret_cast<std::uintptr_t>(run.from),
                       reinterpret_cast<std::uintptr_t>(run.to), run.length, tiles});
    tiles += (run.length + kTileBytes - 1) / kTileBytes;
  }
  if (entries.empty()) return;
  const auto bytes = entries.size() * sizeof(CopyRunEntry);
  auto* device_table = table.reserve(bytes);
  // From pageable memory: the driver has taken the bytes when the call returns.
  driver_.copy_async(device_table, entries.data(), bytes, stream);
  auto table_address = reinterpret_cast<CudaDriver::DevicePointer>(device_table);
  auto count = static_cast<unsigned>(entries.size());
  std::uint64_t tile_bytes = kTileBytes;
  void* parameters[] = {&table_address, &count, &tiles, &tile_bytes};
  driver_.launch(function_, static_cast<unsigned>(std::min(tiles, kMostBlocks)), kThreads, stream,
                 parameters);
}

}  // namespace memwire::detail
