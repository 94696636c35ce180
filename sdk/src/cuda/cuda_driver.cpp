#include "cuda/cuda_driver.hpp"

#include <dlfcn.h>
#include <sys/mman.h>

#include "memwire/error.hpp"

namespace memwire::detail {
namespace {

// Values of the driver API's enums that memwire passes or reads (cuda.h, CUDA 12 and 13).
constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kPointerAttributeRangeStart = 11;    // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kPointerAttributeRangeSize = 12;     // CU_POINTER_ATTRIBUTE_RANGE_SIZE
constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE
constexpr unsigned kHostRegisterPortable = 1;      // CU_MEMHOSTREGISTER_PORTABLE
constexpr unsigned kStreamNonBlocking = 1;         // CU_STREAM_NON_BLOCKING
constexpr unsigned kIpcLazyPeerAccess = 1;         // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

template <class Function>
bool resolve(void* library, const char* name, Function& function, std::string& reason) {
  function = reinterpret_cast<Function>(::dlsym(library, name));
  if (function == nullptr) reason = std::string("libcuda.so.1 has no ") + name;
  return function != nullptr;
}

CudaDriver::DevicePointer address(const void* pointer) {
  return reinterpret_cast<CudaDriver::DevicePointer>(pointer);
}

std::string& reason_storage() {
  static std::string reason;
  return reason;
}

}  // namespace

CudaDriver* CudaDriver::load(std::string& reason) noexcept {
  // RTLD_NODELETE: the driver stays mapped for the process; contexts outlive any of memwire's
  // objects and unloading a driver with live contexts is undefined.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    const char* why = ::dlerror();
    reason = std::string("no CUDA driver: ") + (why != nullptr ? why : "libcuda.so.1 not found");
    return nullptr;
  }
  auto* driver = new CudaDriver();
  driver->library_ = library;
  const bool resolved =
      resolve(library, "cuInit", driver->init_, reason) &&
      resolve(library, "cuDeviceGetCount", driver->device_get_count_, reason) &&
      resolve(library, "cuDeviceGet", driver->device_get_, reason) &&
      resolve(library, "cuDevicePrimaryCtxRetain", driver->primary_context_retain_, reason) &&
      resolve(library, "cuCtxSetCurrent", driver->context_set_current_, reason) &&
      resolve(library, "cuCtxSynchronize", driver->context_synchronize_, reason) &&
      resolve(library, "cuPointerGetAttribute", driver->pointer_get_attribute_, reason) &&
      resolve(library, "cuMemcpyDtoH_v2", driver->copy_dtoh_, reason) &&
      resolve(library, "cuMemcpyHtoD_v2", driver->copy_htod_, reason) &&
      resolve(library, "cuMemcpyDtoD_v2", driver->copy_dtod_, reason) &&
      resolve(library, "cuMemHostRegister_v2", driver->host_register_, reason) &&
      resolve(library, "cuMemHostUnregister", driver->host_unregister_, reason) &&
      resolve(library, "cuMemAlloc_v2", driver->mem_alloc_, reason) &&
      resolve(library, "cuMemFree_v2", driver->mem_free_, reason) &&
      resolve(library, "cuMemGetAddressRange_v2", driver->address_range_, reason) &&
      resolve(library, "cuIpcGetMemHandle", driver->ipc_get_, reason) &&
      resolve(library, "cuIpcOpenMemHandle_v2", driver->ipc_open_, reason) &&
      resolve(library, "cuIpcCloseMemHandle", driver->ipc_close_, reason) &&
      resolve(library, "cuStreamCreate", driver->stream_create_, reason) &&
      resolve(library, "cuStreamDestroy_v2", driver->stream_destroy_, reason) &&
      resolve(library, "cuStreamSynchronize", driver->stream_synchronize_, reason) &&
      resolve(library, "cuEventCreate", driver->event_create_, reason) &&
      resolve(library, "cuEventDestroy_v2", driver->event_destroy_, reason) &&
      resolve(library, "cuEventRecord", driver->event_record_, reason) &&
      resolve(library, "cuEventSynchronize", driver->event_synchronize_, reason) &&
      resolve(library, "cuMemcpyAsync", driver->copy_async_, reason) &&
      resolve(library, "cuModuleLoadData", driver->module_load_data_, reason) &&
      resolve(library, "cuModuleUnload", driver->module_unload_, reason) &&
      resolve(library, "cuModuleGetFunction", driver->module_get_function_, reason) &&
      resolve(library, "cuLaunchKernel", driver->launch_kernel_, reason) &&
      resolve(library, "cuGetErrorName", driver->error_name_, reason) &&
      resolve(library, "cuGetErrorString", driver->error_string_, reason);
  // Optional: drivers before CUDA 12.8 have no batches (copies then go one by one).
  driver->copy_batch_ =
      reinterpret_cast<decltype(driver->copy_batch_)>(::dlsym(library, "cuMemcpyBatchAsync_v2"));
  if (!resolved) {
    delete driver;
    return nullptr;
  }
  if (const Result result = driver->init_(0); result != 0) {
    const char* name = nullptr;
    driver->error_name_(result, &name);
    reason = std::string("cuInit failed: ") + (name != nullptr ? name : std::to_string(result));
    delete driver;
    return nullptr;
  }
  if (driver->device_get_count_(&driver->device_count_) != 0 || driver->device_count_ <= 0) {
    reason = "the CUDA driver sees no device";
    delete driver;
    return nullptr;
  }
  driver->contexts_.assign(static_cast<std::size_t>(driver->device_count_), nullptr);
  return driver;
}

const CudaDriver* CudaDriver::get() noexcept {
  // Loaded once, on first use, and kept for the life of the process.
  static const CudaDriver* const driver = load(reason_storage());
  return driver;
}

const std::string& CudaDriver::unavailable_reason() noexcept {
  (void)get();
  return reason_storage();
}

void CudaDriver::check(Result result, const char* what) const {
  if (result == 0) return;
  const char* name = nullptr;
  const char* text = nullptr;
  error_name_(result, &name);
  error_string_(result, &text);
  throw Error(ErrorCode::Transport, std::string(what) + ": " +
                                        (name != nullptr ? name : std::to_string(result)) +
                                        (text != nullptr ? std::string(" (") + text + ")" : ""));
}

void CudaDriver::use_device(int ordinal) const {
  if (ordinal < 0 || ordinal >= device_count_)
    throw Error(ErrorCode::InvalidArgument, "cuda:" + std::to_string(ordinal) +
                                                " does not exist (" +
                                                std::to_string(device_count_) + " device(s))");
  Context context = nullptr;
  {
    std::lock_guard lock(contexts_mutex_);
    auto& retained = contexts_[static_cast<std::size_t>(ordinal)];
    if (retained == nullptr) {
      int device = 0;
      check(device_get_(&device, ordinal), "cuDeviceGet");
      check(primary_context_retain_(&retained, device), "cuDevicePrimaryCtxRetain");
    }
    context = retained;
  }
  check(context_set_current_(context), "cuCtxSetCurrent");
}

int CudaDriver::device_of(const void* pointer, std::size_t size) const {
  unsigned memory_type = 0;
  if (pointer_get_attribute_(&memory_type, kPointerAttributeMemoryType, address(pointer)) != 0 ||
      memory_type != kMemoryTypeDevice)
    throw Error(ErrorCode::InvalidArgument, "not CUDA device memory");
  int ordinal = -1;
  DevicePointer start = 0;
  std::size_t length = 0;
  check(pointer_get_attribute_(&ordinal, kPointerAttributeDeviceOrdinal, address(pointer)),
        "cuPointerGetAttribute(DEVICE_ORDINAL)");
  check(pointer_get_attribute_(&start, kPointerAttributeRangeStart, address(pointer)),
        "cuPointerGetAttribute(RANGE_START_ADDR)");
  check(pointer_get_attribute_(&length, kPointerAttributeRangeSize, address(pointer)),
        "cuPointerGetAttribute(RANGE_SIZE)");
  const auto offset = address(pointer) - start;
  if (size > length - offset)
    throw Error(ErrorCode::InvalidArgument,
                std::to_string(size) + " bytes run past the end of their CUDA allocation (" +
                    std::to_string(length - offset) + " bytes left in it)");
  return ordinal;
}

CudaDriver::Allocation CudaDriver::allocation_of(const void* pointer) const {
  Allocation allocation;
  if (address_range_(&allocation.base, &allocation.size, address(pointer)) != 0)
    throw Error(ErrorCode::InvalidArgument, "not CUDA device memory");
  return allocation;
}

bool CudaDriver::ipc_handle_of(DevicePointer base, IpcHandle& handle) const noexcept {
  return ipc_get_(&handle, base) == 0;
}

CudaDriver::DevicePointer CudaDriver::open_ipc(const IpcHandle& handle) const {
  DevicePointer mapped = 0;
  check(ipc_open_(&mapped, handle, kIpcLazyPeerAccess), "cuIpcOpenMemHandle");
  return mapped;
}

void CudaDriver::close_ipc(DevicePointer mapped) const noexcept { ipc_close_(mapped); }

CudaDriver::Stream CudaDriver::create_stream() const {
  Stream stream = nullptr;
  check(stream_create_(&stream, kStreamNonBlocking), "cuStreamCreate");
  return stream;
}

void CudaDriver::destroy_stream(Stream stream) const noexcept { stream_destroy_(stream); }

void CudaDriver::copy_async(void* to, const void* from, std::size_t size, Stream stream) const {
  check(copy_async_(address(to), address(from), size, stream), "cuMemcpyAsync");
}

bool CudaDriver::copy_batch_async(DevicePointer* to, DevicePointer* from, std::size_t* sizes,
                                  std::size_t count, Stream stream) const noexcept {
  if (copy_batch_ == nullptr) return false;
  // CUmemcpyAttributes: source read in stream order, no location hints, no flags.
  struct {
    int source_access_order = 1;  // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
    int source_hint[2] = {0, 0};
    int destination_hint[2] = {0, 0};
    unsigned flags = 0;
  } attributes;
  static_assert(sizeof attributes == 24);
  std::size_t first = 0;
  return copy_batch_(to, from, sizes, count, &attributes, &first, 1, stream) == 0;
}

void CudaDriver::wait(Stream stream) const {
  check(stream_synchronize_(stream), "cuStreamSynchronize");
}

CudaDriver::Event CudaDriver::create_event() const {
  constexpr unsigned kDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING: cheaper to record
  Event event = nullptr;
  check(event_create_(&event, kDisableTiming), "cuEventCreate");
  return event;
}

void CudaDriver::destroy_event(Event event) const noexcept { event_destroy_(event); }

void CudaDriver::record(Event event, Stream stream) const {
  check(event_record_(event, stream), "cuEventRecord");
}

void CudaDriver::wait_event(Event event) const {
  check(event_synchronize_(event), "cuEventSynchronize");
}

CudaDriver::Module CudaDriver::load_module(const char* ptx) const {
  Module module = nullptr;
  check(module_load_data_(&module, ptx), "cuModuleLoadData");
  return module;
}

void CudaDriver::unload_module(Module module) const noexcept {
  if (module != nullptr) module_unload_(module);
}

CudaDriver::Function CudaDriver::function_of(Module module, const char* name) const {
  Function function = nullptr;
  check(module_get_function_(&function, module, name), "cuModuleGetFunction");
  return function;
}

void CudaDriver::launch(Function function, unsigned grid, unsigned block, Stream stream,
                        void** parameters) const {
  check(launch_kernel_(function, grid, 1, 1, block, 1, 1, 0, stream, parameters, nullptr),
        "cuLaunchKernel");
}

void CudaDriver::copy_to_host(void* host, const void* device, std::size_t size) const {
  check(copy_dtoh_(host, address(device), size), "cuMemcpyDtoH");
}

void CudaDriver::copy_to_device(void* device, const void* host, std::size_t size) const {
  check(copy_htod_(address(device), host, size), "cuMemcpyHtoD");
}

void CudaDriver::copy_device_to_device(void* to, const void* from, std::size_t size) const {
  check(copy_dtod_(address(to), address(from), size), "cuMemcpyDtoD");
  // Device to device returns before the copy ends: wait, as the other two copies do.
  check(context_synchronize_(), "cuCtxSynchronize");
}

void* CudaDriver::allocate_pinned(std::size_t size) const {
  void* host = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED)
    throw Error(ErrorCode::Transport,
                "cannot map " + std::to_string(size) + " bytes to stage through");
  try {
    check(host_register_(host, size, kHostRegisterPortable), "cuMemHostRegister");
  } catch (...) {
    ::munmap(host, size);
    throw;
  }
  return host;
}

void CudaDriver::free_pinned(void* host, std::size_t size) const noexcept {
  if (host == nullptr) return;
  host_unregister_(host);
  ::munmap(host, size);
}

void* CudaDriver::allocate_device(std::size_t size) const {
  DevicePointer device = 0;
  check(mem_alloc_(&device, size), "cuMemAlloc");
  return reinterpret_cast<void*>(device);
}

void CudaDriver::free_device(void* device) const noexcept {
  if (device != nullptr) mem_free_(address(device));
}

}  // namespace memwire::detail
