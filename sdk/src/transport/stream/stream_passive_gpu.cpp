// The owner's side of pools in GPU memory: StreamPassiveSide's GPU members (the rest is in
// stream_passive_side.cpp).
#include <unistd.h>

#include <cstring>

#include "core/registration.hpp"
#include "cuda/cuda_copies.hpp"
#include "cuda/cuda_staging.hpp"
#include "cuda/gpu_pool_memory.hpp"
#include "owner/pool_facts.hpp"
#include "transport/stream/stream_passive_side.hpp"

namespace memwire::detail {

OpenedAllocation StreamPassiveSide::open_peer_allocation(const CudaDriver& driver, int ordinal,
                                                         const FrameIpcAllocation& entry) {
  if (peer_process_ == ::getpid()) {
    // A peer in this very process: the driver opens no handle of its own process, and the
    // peer's addresses are ours. What the driver says of the allocation is still what counts.
    driver.use_device(ordinal);
    const auto allocation = driver.allocation_of(reinterpret_cast<const void*>(entry.base));
    if (allocation.base != entry.base)
      throw Error(ErrorCode::AccessDenied, "the address is not the start of an allocation");
    return {reinterpret_cast<std::byte*>(allocation.base), allocation.size};
  }
  CudaDriver::IpcHandle handle;
  std::memcpy(handle.bytes, entry.handle, sizeof handle.bytes);
  const auto mapping = ipc_mappings_.open(driver, ordinal, handle);
  return {mapping->base(), mapping->size()};
}

void StreamPassiveSide::serve_gpu_pieces(StreamConnection& connection, const FrameHeader& header,
                                         const std::shared_ptr<Registration>& registration,
                                         std::span<const FramePiece> pieces,
                                         std::span<const FrameIpcAllocation> table,
                                         std::vector<iovec> memory, std::uint64_t& unread,
                                         std::optional<AccessGate::Pin> grant_pin) {
  const bool writing = is_write_request(header.type);
  const bool cross = (header.flags & frame_flags::kCrossMemory) != 0;
  const auto gpu = gpu_memory(*registration);
  OutFrame response;
  response.header.type = writing ? FrameType::WriteResponse : FrameType::ReadResponse;
  response.header.request_id = header.request_id;
  if (!table.empty()) {
    // The device memory the pieces name, and its GPU: a pool's blocks, or the device memory
    // behind a one-shot operation's stand-ins (same descriptors, same offsets).
    const auto* staging = registration->staging();
    if (!gpu && staging == nullptr)
      throw Error(ErrorCode::Protocol, "a CUDA IPC request for memory that is not on a GPU");
    const auto& driver = gpu ? gpu->driver() : CudaStaging::require_driver();
    int ordinal = gpu ? gpu->ordinal() : -1;
    if (!gpu) {
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        const auto& device = staging->device()[pieces[i].index];
        if (ordinal >= 0 && device.device().id() != ordinal)
          throw Error(ErrorCode::InvalidArgument,
                      "a CUDA IPC request across two GPUs of this operation");
        ordinal = device.device().id();
        memory[i].iov_base = static_cast<std::byte*>(device.ptr()) + pieces[i].offset;
      }
    }
    same_host();  // throws unless this peer is on this host
    // Every piece checked, and every allocation opened, before a byte moves.
    const auto places = place_ipc_pieces(pieces, table, [&](const FrameIpcAllocation& entry) {
      return open_peer_allocation(driver, ordinal, entry);
    });
    auto pin = registration->admit(transport_);
    touch(registration);
    registration->note_moved(header.length);
    std::vector<CopyRun> runs;
    runs.reserve(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i)
      runs.push_back(writing ? CopyRun{memory[i].iov_base, places[i], memory[i].iov_len}
                             : CopyRun{places[i], memory[i].iov_base, memory[i].iov_len});
    // One kernel launch for many runs; waited for here: the answer (and a tag behind it) says
    // the bytes are in place.
    copy_runs(driver, ordinal, runs, CopyDirection::DeviceToDevice);
    // A one-shot writable's device memory is now newer than its stand-ins.
    if (writing && staging != nullptr) staging->note_written_on_device();
    {
      auto copied = std::move(pin);
      auto granted = std::move(grant_pin);
    }
    if (!writing) response.header.flags = frame_flags::kCrossMemory;
    return finish_request(connection, header, registration, std::move(response));
  }
  auto bounce = gpu->bounce(header.length);
  auto pin = registration->admit(transport_);
  touch(registration);
  registration->note_moved(header.length);
  if (!cross && writing) {
    unread = 0;
    connection.receive_into(
        {{bounce.get(), static_cast<std::size_t>(header.length)}},
        [this, &connection, header, registration, gpu, bounce, memory = std::move(memory),
         pin = std::move(pin), grant_pin = std::move(grant_pin),
         response = std::move(response)]() mutable {
          try {
            gpu->scatter(memory, bounce.get());
          } catch (const Error& error) {
            {
              auto failed = std::move(pin);
              auto granted = std::move(grant_pin);
            }
            transfers_.refuse(as_pool(header).transfer);
            return answer(connection, FrameType::WriteResponse, header, &error);
          }
          {
            auto landed = std::move(pin);
            auto granted = std::move(grant_pin);
          }
          finish_request(connection, header, registration, std::move(response));
        });
    return;
  }
  if (!cross) {
    // Copied out of the blocks now: what is sent is the bounce buffer, kept until it is out.
    gpu->gather(bounce.get(), memory);
    // The connection sends registered bytes under a pin of their gate (the pool's, as for host
    // memory); the answer keeps the pool and the bounce buffer until its last byte is out.
    // A request grant's pin too: the grant's bytes are copied out already, but its release
    // still waits for this answer as it does for host memory.
    struct BouncedAnswer {
      std::shared_ptr<Registration> pool;
      std::shared_ptr<std::byte> bounce;
      std::optional<AccessGate::Pin> grant_pin;
    };
    response.header.length = header.length;
    response.data = bounce.get();
    response.gate = &registration->gate();
    response.pin = std::move(pin);
    response.keep_alive = std::make_shared<const BouncedAnswer>(
        BouncedAnswer{registration, bounce, std::move(grant_pin)});
    return finish_request(connection, header, registration, std::move(response));
  }
  // A peer's host memory on this host: the kernel copies between it and the bounce buffer.
  auto& host = same_host();
  const auto theirs = peer_ranges(pieces);
  const iovec ours{bounce.get(), static_cast<std::size_t>(header.length)};
  if (writing) {
    host.copy_from_peer(theirs, std::span(&ours, 1));
    gpu->scatter(memory, bounce.get());
  } else {
    gpu->gather(bounce.get(), memory);
    host.copy_to_peer(theirs, std::span(&ours, 1));
    response.header.flags = frame_flags::kCrossMemory;
  }
  {
    auto copied = std::move(pin);
    auto granted = std::move(grant_pin);
  }
  finish_request(connection, header, registration, std::move(response));
}

}  // namespace memwire::detail
