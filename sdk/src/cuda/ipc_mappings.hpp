#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "cuda/cuda_driver.hpp"

namespace memwire::detail {

// Another process's GPU allocation opened in this one (cuIpcOpenMemHandle), closed when the
// last user lets go.
class IpcMapping {
 public:
  // Throws Error{Transport} with the driver's reason when the handle does not open.
  IpcMapping(const CudaDriver& driver, int ordinal, const CudaDriver::IpcHandle& handle);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  std::byte* base() const noexcept { return reinterpret_cast<std::byte*>(mapped_); }
  // What the driver says the opened allocation holds, never what the peer said.
  std::uint64_t size() const noexcept { return size_; }

 private:
  const CudaDriver& driver_;
  const int ordinal_;
  CudaDriver::DevicePointer mapped_ = 0;
  std::uint64_t size_ = 0;
};

// The peer allocations one connection opened, by handle: each opened once (a process opens a
// handle once, shared by all its connections), closed when the connection ends and no other
// connection of this process still uses it.
class IpcMappings {
 public:
  static constexpr std::size_t kMostOpen = 4096;  // per connection; beyond: Error{Transport}
  std::shared_ptr<const IpcMapping> open(const CudaDriver& driver, int ordinal,
                                         const CudaDriver::IpcHandle& handle);

 private:
  using Key = std::array<unsigned char, sizeof(CudaDriver::IpcHandle)>;
  std::map<Key, std::shared_ptr<const IpcMapping>> opened_;
};

}  // namespace memwire::detail
