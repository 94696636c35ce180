#include "memwire/device.hpp"

#include <charconv>

#include "cuda/cuda_driver.hpp"
#include "memwire/error.hpp"
#include "util/enum_names.hpp"

namespace memwire {

std::string_view to_string(DeviceKind kind) noexcept {
  return detail::enum_name<DeviceKind::Cuda>(kind, {"unspecified", "cpu", "cuda"}, "unknown");
}

Device::Device(DeviceKind kind, int id) : kind_(kind), id_(id) {
  if (kind == DeviceKind::Unspecified)
    throw Error(ErrorCode::InvalidArgument, "device kind unspecified");
  if (id < 0) throw Error(ErrorCode::InvalidArgument, "device id must not be negative");
  if (kind == DeviceKind::Host && id != 0)
    throw Error(ErrorCode::InvalidArgument, "host device id must be 0");
}

Device Device::parse(std::string_view text) {
  auto fail = [&]() -> Device {
    throw Error(ErrorCode::InvalidArgument, "unknown device '" + std::string(text) + "'");
  };
  if (text == "cpu" || text == "host") return Device();
  std::string_view rest;
  if (text.starts_with("cuda")) {
    rest = text.substr(4);
  } else if (text.starts_with("gpu")) {
    rest = text.substr(3);
  } else {
    return fail();
  }
  if (rest.empty()) return Device(DeviceKind::Cuda, 0);
  if (rest.front() != ':' || rest.size() < 2) return fail();
  rest.remove_prefix(1);
  int id = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), id);
  if (ec != std::errc() || end != rest.data() + rest.size() || id < 0) return fail();
  return Device(DeviceKind::Cuda, id);
}

std::string Device::to_string() const {
  if (kind_ == DeviceKind::Cuda) return "cuda:" + std::to_string(id_);
  return "cpu";
}

int cuda_device_count() noexcept {
  const auto* driver = detail::CudaDriver::get();
  return driver ? driver->device_count() : 0;
}

}  // namespace memwire
