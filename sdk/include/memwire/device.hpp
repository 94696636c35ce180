#pragma once

#include <string>
#include <string_view>

#include "memwire/export.hpp"

namespace memwire {

enum class DeviceKind { Unspecified = 0, Host = 1, Cuda = 2 };

MEMWIRE_API std::string_view to_string(DeviceKind kind) noexcept;

// Where a descriptor's memory lives: host memory or one CUDA device.
class MEMWIRE_API Device {
 public:
  Device() = default;  // host:0
  explicit Device(DeviceKind kind, int id = 0);

  // "cpu" / "host" -> Host; "cuda", "cuda:N", "gpu", "gpu:N" -> Cuda. Anything else throws.
  static Device parse(std::string_view text);

  DeviceKind kind() const noexcept { return kind_; }
  int id() const noexcept { return id_; }
  std::string to_string() const;  // "cpu" or "cuda:N"

  friend bool operator==(const Device&, const Device&) = default;

 private:
  DeviceKind kind_ = DeviceKind::Host;
  int id_ = 0;
};

// CUDA devices memwire can move memory of: those the CUDA driver sees (libcuda.so.1, loaded and
// initialized once per process, at the first ask); 0 without a driver or when it fails to start.
MEMWIRE_API int cuda_device_count() noexcept;

}  // namespace memwire
