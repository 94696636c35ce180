#pragma once

#include <cstddef>
#include <cstdint>

namespace memwire_python {

// How this process may touch [address, address + size), from /proc/self/maps: a raw pointer
// handed in from Python is checked once, so that a transport never faults on memory that is
// not there (a hole, PROT_NONE) or writes into memory that is read-only.
enum class HostAccess { None = 0, Read = 1, ReadWrite = 2 };

HostAccess host_memory_access(std::uintptr_t address, std::size_t size);

}  // namespace memwire_python
