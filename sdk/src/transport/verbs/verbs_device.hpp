#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "telemetry/telemetry_recorder.hpp"
#include "transport/verbs/verbs_handles.hpp"

namespace memwire::detail::verbs {

// At most this many rails (RDMA devices) per connector: each costs a listener, a completion
// channel and a registration of every offered buffer.
inline constexpr std::size_t kMaxRails = 8;

// The RDMA device port this transport runs on: librdmacm's context for it (cm ids resolve to
// that context, so QPs and memory regions must use it too), one protection domain, the IPv4
// address of the chosen RoCE v2 GID, and the limits the data path respects.
class VerbsDevice {
 public:
  // The first device with an active port whose GID table holds a RoCE v2 GID with an IPv4
  // address; `wanted` ("" = any) picks the device by name, `gid_index` (-1 = automatic) the
  // GID. Throws Error{Transport} when there is none.
  // `telemetry`: counts every memory registration made with it (null: not counted).
  VerbsDevice(const std::string& wanted, int gid_index,
              std::shared_ptr<TelemetryRecorder> telemetry = nullptr);
  // The names of the RDMA devices present, in the order librdmacm lists them.
  static std::vector<std::string> device_names();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  ibv_context* context() const noexcept { return context_; }
  ibv_pd* pd() const noexcept { return pd_.get(); }
  const std::string& name() const noexcept { return name_; }
  std::uint8_t port() const noexcept { return port_; }
  int gid_index() const noexcept { return gid_index_; }
  const std::string& ipv4() const noexcept { return ipv4_; }
  std::uint32_t max_message_size() const noexcept { return max_message_size_; }
  int max_queue_depth() const noexcept { return max_qp_wr_; }
  int max_cq_entries() const noexcept { return max_cqe_; }
  // Whether the device binds type-2 memory windows to one QP (IBV_DEVICE_MEM_WINDOW_TYPE_2B):
  // remote access a peer gets only after presenting a token, usable from its QP alone.
  bool binds_windows() const noexcept { return binds_windows_; }

  // Registers [address, address + length) with `access`; throws Error{Transport} naming why.
  Mr register_memory(void* address, std::size_t length, int access) const;
  // The same in another protection domain of this device (a connection's own).
  Mr register_memory(ibv_pd* pd, void* address, std::size_t length, int access) const;

 private:
  std::shared_ptr<TelemetryRecorder> telemetry_;
  DeviceList devices_;
  ibv_context* context_ = nullptr;
  Pd pd_;
  std::string name_;
  std::uint8_t port_ = 0;
  int gid_index_ = -1;
  std::string ipv4_;
  std::uint32_t max_message_size_ = 0;
  int max_qp_wr_ = 0;
  int max_cqe_ = 0;
  bool binds_windows_ = false;
};

}  // namespace memwire::detail::verbs
