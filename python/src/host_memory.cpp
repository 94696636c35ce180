#include "host_memory.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

namespace memwire_python {

HostAccess host_memory_access(std::uintptr_t address, std::size_t size) {
  if (size == 0 || address + size < address) return HostAccess::None;
  std::unique_ptr<FILE, int (*)(FILE*)> maps(std::fopen("/proc/self/maps", "re"), &std::fclose);
  if (!maps) return HostAccess::None;
  const std::uintptr_t end = address + size;
  std::uintptr_t covered = address;  // everything below it is mapped readable
  bool writable = true;
  char line[512];
  // Mappings come sorted by address; walk them until the range is covered or a hole shows.
  while (std::fgets(line, sizeof line, maps.get()) != nullptr) {
    if (std::strchr(line, '\n') == nullptr) {  // a long path: skip the rest of this line
      int c = 0;
      while ((c = std::fgetc(maps.get())) != EOF && c != '\n') {
      }
    }
    std::uintptr_t from = 0;
    std::uintptr_t to = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &from, &to, perms) != 3) continue;
    if (to <= covered) continue;
    if (from > covered || perms[0] != 'r') return HostAccess::None;
    writable = writable && perms[1] == 'w';
    covered = to;
    if (covered >= end) return writable ? HostAccess::ReadWrite : HostAccess::Read;
  }
  return HostAccess::None;
}

}  // namespace memwire_python
