#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace memwire::detail {

// The few CUDA driver API entry points memwire uses, resolved at run time from libcuda.so.1
// (dlopen), so that one build runs on machines with and without a GPU. The declarations are
// memwire's own: the driver API is plain C (an int result, opaque handles, 64-bit device
// addresses); no CUDA header is needed to build.
class CudaDriver {
 public:
  using Result = int;                        // CUresult; 0 = CUDA_SUCCESS
  using DevicePointer = unsigned long long;  // CUdeviceptr
  using Context = void*;                     // CUcontext
  using Stream = void*;                      // CUstream
  using Module = void*;                      // CUmodule
  using Function = void*;                    // CUfunction
  using Event = void*;                       // CUevent
  // CUipcMemHandle: 64 opaque bytes, passed by value as the driver's struct is.
  struct IpcHandle {
    unsigned char bytes[64];
  };
  static_assert(sizeof(IpcHandle) == 64);
  // The CUDA allocation that holds an address: its first byte and its size.
  struct Allocation {
    DevicePointer base = 0;
    std::size_t size = 0;
  };

  // The process's driver, loaded and initialized once; null when there is none (no
  // libcuda.so.1, cuInit failed, no device). unavailable_reason() then says why.
  static const CudaDriver* get() noexcept;
  static const std::string& unavailable_reason() noexcept;

  int device_count() const noexcept { return device_count_; }

  // Makes device `ordinal`'s primary context current on the calling thread (retained once
  // per device for the life of the process). Throws Error{Transport} on a driver error.
  void use_device(int ordinal) const;

  // Where `pointer` lives according to the driver: a device ordinal when it is device memory
  // inside one allocation that holds [pointer, pointer + size), else throws
  // Error{InvalidArgument} saying what is wrong (host memory, range past the allocation).
  int device_of(const void* pointer, std::size_t size) const;

  // The allocation holding device memory `pointer` (of the current context's device); throws
  // Error{InvalidArgument} when it is none.
  Allocation allocation_of(const void* pointer) const;
  // An IPC handle for the allocation at `base` (cuIpcGetMemHandle); false when the driver
  // refuses (memory from cuMemCreate or a stream-ordered pool has none).
  bool ipc_handle_of(DevicePointer base, IpcHandle& handle) const noexcept;
  // Opens another process's allocation in the current context; throws Error{Transport} with
  // the driver's reason. close_ipc undoes it.
  DevicePointer open_ipc(const IpcHandle& handle) const;
  void close_ipc(DevicePointer mapped) const noexcept;
  // A non-blocking stream of the current context; copies on it are ordered, and wait() on the
  // calling thread ends when all of them have landed.
  Stream create_stream() const;
  void destroy_stream(Stream stream) const noexcept;
  // Any two unified addresses (device, pinned or plain host memory), queued on `stream`.
  void copy_async(void* to, const void* from, std::size_t size, Stream stream) const;
  // Many copies queued at once (cuMemcpyBatchAsync, CUDA 12.8+): a block run costs no launch of
  // its own. False when this driver has no batches or refused this one: queue them one by one.
  bool copy_batch_async(DevicePointer* to, DevicePointer* from, std::size_t* sizes,
                        std::size_t count, Stream stream) const noexcept;
  void wait(Stream stream) const;
  // Events (no timing): one recorded after the copies queued so far on `stream`; waiting on it
  // waits for those copies alone, not for what was queued after.
  Event create_event() const;
  void destroy_event(Event event) const noexcept;
  void record(Event event, Stream stream) const;
  void wait_event(Event event) const;

  // Kernels (memwire's own PTX, src/cuda/kernels/): a module of the current context from PTX
  // text (the driver compiles it for this GPU), a function of it, and a launch on a stream with
  // one-dimensional grid and blocks. Throw Error{Transport} with the driver's reason.
  Module load_module(const char* ptx) const;
  void unload_module(Module module) const noexcept;
  Function function_of(Module module, const char* name) const;
  void launch(Function function, unsigned grid, unsigned block, Stream stream,
              void** parameters) const;

  // Synchronous copies (the calling thread waits until the bytes arrived).
  void copy_to_host(void* host, const void* device, std::size_t size) const;
  void copy_to_device(void* device, const void* host, std::size_t size) const;
  void copy_device_to_device(void* to, const void* from, std::size_t size) const;

  // Page-locked host memory the GPU's copy engines reach directly; throws on failure. Plain
  // anonymous pages registered with the driver (not the driver's own mapping), so that other
  // processes' process_vm_readv/writev (shm) and ibv_reg_mr (verbs) can reach them too.
  void* allocate_pinned(std::size_t size) const;
  void free_pinned(void* host, std::size_t size) const noexcept;
  // Device memory of the current device (tests and bench).
  void* allocate_device(std::size_t size) const;
  void free_device(void* device) const noexcept;

  // Throws Error{Transport} "<what>: <driver's name and text for result>" unless result is 0.
  void check(Result result, const char* what) const;

 private:
  CudaDriver() = default;
  static CudaDriver* load(std::string& reason) noexcept;

  int device_count_ = 0;
  mutable std::mutex contexts_mutex_;
  mutable std::vector<Context> contexts_;  // retained primary context per ordinal, or null
  void* library_ = nullptr;
  Result (*init_)(unsigned) = nullptr;
  Result (*device_get_count_)(int*) = nullptr;
  Result (*device_get_)(int*, int) = nullptr;
  Result (*primary_context_retain_)(Context*, int) = nullptr;
  Result (*context_set_current_)(Context) = nullptr;
  Result (*context_synchronize_)() = nullptr;
  Result (*pointer_get_attribute_)(void*, int, DevicePointer) = nullptr;
  Result (*copy_dtoh_)(void*, DevicePointer, std::size_t) = nullptr;
  Result (*copy_htod_)(DevicePointer, const void*, std::size_t) = nullptr;
  Result (*copy_dtod_)(DevicePointer, DevicePointer, std::size_t) = nullptr;
  Result (*host_register_)(void*, std::size_t, unsigned) = nullptr;
  Result (*host_unregister_)(void*) = nullptr;
  Result (*mem_alloc_)(DevicePointer*, std::size_t) = nullptr;
  Result (*mem_free_)(DevicePointer) = nullptr;
  Result (*address_range_)(DevicePointer*, std::size_t*, DevicePointer) = nullptr;
  Result (*ipc_get_)(IpcHandle*, DevicePointer) = nullptr;
  Result (*ipc_open_)(DevicePointer*, IpcHandle, unsigned) = nullptr;
  Result (*ipc_close_)(DevicePointer) = nullptr;
  Result (*stream_create_)(Stream*, unsigned) = nullptr;
  Result (*stream_destroy_)(Stream) = nullptr;
  Result (*stream_synchronize_)(Stream) = nullptr;
  Result (*event_create_)(Event*, unsigned) = nullptr;
  Result (*event_destroy_)(Event) = nullptr;
  Result (*event_record_)(Event, Stream) = nullptr;
  Result (*event_synchronize_)(Event) = nullptr;
  Result (*copy_async_)(DevicePointer, DevicePointer, std::size_t, Stream) = nullptr;
  Result (*copy_batch_)(DevicePointer*, DevicePointer*, std::size_t*, std::size_t, void*,
                        std::size_t*, std::size_t, Stream) = nullptr;  // optional
  Result (*module_load_data_)(Module*, const void*) = nullptr;
  Result (*module_unload_)(Module) = nullptr;
  Result (*module_get_function_)(Function*, Module, const char*) = nullptr;
  Result (*launch_kernel_)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, Stream, void**, void**) = nullptr;
  Result (*error_name_)(Result, const char**) = nullptr;
  Result (*error_string_)(Result, const char**) = nullptr;
};

}  // namespace memwire::detail
