#include "transport/verbs/verbs_device.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "memwire/error.hpp"

namespace memwire::detail::verbs {
namespace {

// "a.b.c.d" when the GID is an IPv4-mapped IPv6 address (::ffff:a.b.c.d), as RoCE GIDs of
// IPv4 addresses are.
std::optional<std::string> ipv4_of(const ibv_gid& gid) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kPrefix, sizeof kPrefix) != 0) return std::nullopt;
  char text[INET_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET, gid.raw + 12, text, sizeof text) == nullptr) return std::nullopt;
  return std::string(text);
}

struct Choice {
  int gid_index;
  std::string ipv4;
};

// The GID this port would be reached by: the one asked for, or the first RoCE v2 GID of an
// IPv4 address (what rdma_cm uses by default for an IPv4 connection).
std::optional<Choice> choose_gid(ibv_context* context, std::uint8_t port, int table_size,
                                 int wanted, std::string& why_not) {
  ibv_gid_entry entry{};
  if (wanted >= 0) {
    if (ibv_query_gid_ex(context, port, static_cast<std::uint32_t>(wanted), &entry, 0) != 0) {
      why_not = "GID index " + std::to_string(wanted) + " is empty";
      return std::nullopt;
    }
    if (auto address = ipv4_of(entry.gid)) return Choice{wanted, *address};
    why_not = "GID index " + std::to_string(wanted) + " holds no IPv4 address";
    return std::nullopt;
  }
  for (int index = 0; index < table_size; ++index) {
    if (ibv_query_gid_ex(context, port, static_cast<std::uint32_t>(index), &entry, 0) != 0)
      continue;  // an empty slot
    if (entry.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    if (auto address = ipv4_of(entry.gid)) return Choice{index, *address};
  }
  why_not = "no RoCE v2 GID with an IPv4 address";
  return std::nullopt;
}

}  // namespace

std::vector<std::string> VerbsDevice::device_names() {
  int count = 0;
  DeviceList devices(rdma_get_devices(&count));
  std::vector<std::string> names;
  for (int i = 0; devices && i < count; ++i)
    names.emplace_back(ibv_get_device_name(devices.get()[i]->device));
  return names;
}

VerbsDevice::VerbsDevice(const std::string& wanted, int gid_index,
                         std::shared_ptr<TelemetryRecorder> telemetry)
    : telemetry_(std::move(telemetry)) {
  int count = 0;
  devices_.reset(rdma_get_devices(&count));
  if (!devices_ || count <= 0)
    throw Error(ErrorCode::Transport, "no RDMA device with an active port");

  std::string reasons;
  bool any_active = false;
  for (int i = 0; i < count; ++i) {
    ibv_context* context = devices_.get()[i];
    const std::string name = ibv_get_device_name(context->device);
    if (!wanted.empty() && name != wanted) continue;
    ibv_device_attr device{};
    if (ibv_query_device(context, &device) != 0) continue;
    for (int port = 1; port <= device.phys_port_cnt; ++port) {
      ibv_port_attr attributes{};
      if (ibv_query_port(context, static_cast<std::uint8_t>(port), &attributes) != 0 ||
          attributes.state != IBV_PORT_ACTIVE)
        continue;
      any_active = true;
      std::string why_not;
      auto choice = choose_gid(context, static_cast<std::uint8_t>(port), attributes.gid_tbl_len,
                               gid_index, why_not);
      if (!choice) {
        reasons += "; " + name + " port " + std::to_string(port) + ": " + why_not;
        continue;
      }
      pd_.reset(ibv_alloc_pd(context));
      if (!pd_)
        throw Error(ErrorCode::Transport,
                    "cannot allocate a protection domain on " + name + ": " + std::strerror(errno));
      context_ = context;
      name_ = name;
      port_ = static_cast<std::uint8_t>(port);
      gid_index_ = choice->gid_index;
      ipv4_ = choice->ipv4;
      max_message_size_ = attributes.max_msg_sz;
      max_qp_wr_ = device.max_qp_wr;
      max_cqe_ = device.max_cqe;
      binds_windows_ =
          device.max_mw > 0 && (device.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
      return;
    }
  }
  if (!wanted.empty() && !any_active)
    throw Error(ErrorCode::Transport,
                "RDMA device '" + wanted + "' not found or without an active port");
  if (!any_active) throw Error(ErrorCode::Transport, "no RDMA device with an active port");
  throw Error(ErrorCode::Transport, "no usable RDMA port" + reasons);
}

Mr VerbsDevice::register_memory(void* address, std::size_t length, int access) const {
  return register_memory(pd_.get(), address, length, access);
}

Mr VerbsDevice::register_memory(ibv_pd* pd, void* address, std::size_t length, int access) const {
  Mr mr(ibv_reg_mr(pd, address, length, access));
  if (!mr)
    throw Error(ErrorCode::Transport, "cannot register " + std::to_string(length) + " bytes with " +
                                          name_ + ": " + std::strerror(errno) +
                                          (errno == ENOMEM ? " (RLIMIT_MEMLOCK too low?)" : ""));
  if (telemetry_) telemetry_->memory_region_registered();
  return mr;
}

}  // namespace memwire::detail::verbs
