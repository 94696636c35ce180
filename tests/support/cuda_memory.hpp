#pragma once
// GPU memory for the CUDA tests (tests/sdk/cuda/): REQUIRE_CUDA() and DeviceBytes. Programs
// that include it link memwire-internal (the CUDA driver is internal).

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/cuda_driver.hpp"
#include "memwire/descriptor.hpp"
#include "support/pattern.hpp"

// Skips the test, saying why, where there is no CUDA device; else declares `driver` (the
// loaded CudaDriver) with device 0 current.
#define REQUIRE_CUDA()                                                                \
  const ::memwire::detail::CudaDriver* driver = ::memwire::detail::CudaDriver::get(); \
  if (driver == nullptr)                                                              \
    GTEST_SKIP() << "no CUDA device here: "                                           \
                 << ::memwire::detail::CudaDriver::unavailable_reason();              \
  driver->use_device(0)

namespace memwire::test_support {

// Device memory of one test on device 0, filled with a pattern and read back whole through host
// copies.
class DeviceBytes {
 public:
  DeviceBytes(const detail::CudaDriver& driver, std::size_t size)
      : driver_(driver),
        size_(size),
        memory_(static_cast<std::byte*>(driver.allocate_device(size))) {}
  ~DeviceBytes() { driver_.free_device(memory_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  std::byte* data() const { return memory_; }
  std::size_t size() const { return size_; }
  // Bytes [offset, offset + length) (length 0: to the end).
  Descriptor descriptor(std::size_t offset = 0, std::size_t length = 0) const {
    return Descriptor(memory_ + offset, length ? length : size_ - offset,
                      Device(DeviceKind::Cuda, 0));
  }
  void fill(std::uint64_t seed) const {
    std::vector<std::byte> host(size_);
    fill_pattern(host, seed);
    driver_.copy_to_device(memory_, host.data(), size_);
  }
  // Index of the first byte that differs from the pattern `seed`; size() when none does.
  std::size_t first_mismatch(std::uint64_t seed) const {
    std::vector<std::byte> host(size_);
    driver_.copy_to_host(host.data(), memory_, size_);
    return test_support::first_mismatch(host, seed);
  }

 private:
  const detail::CudaDriver& driver_;
  std::size_t size_;
  std::byte* memory_;
};

}  // namespace memwire::test_support
