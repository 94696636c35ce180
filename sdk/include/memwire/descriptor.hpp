#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "memwire/device.hpp"
#include "memwire/export.hpp"

namespace memwire {

// A view of memory: (ptr, size, device). Never copies and never owns.
class MEMWIRE_API Descriptor {
 public:
  Descriptor(void* ptr, std::size_t size, Device device = {})
      : ptr_(ptr), size_(size), device_(device) {}

  template <typename T>
  requires std::is_trivially_copyable_v<T> &&
      (!std::is_const_v<T>)explicit Descriptor(std::span<T> data, Device device = {})
      : Descriptor(data.data(), data.size_bytes(), device) {}

  void* ptr() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  const Device& device() const noexcept { return device_; }
  std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(ptr_), size_}; }

 private:
  void* ptr_;
  std::size_t size_;
  Device device_;
};

}  // namespace memwire
