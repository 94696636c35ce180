#pragma once

#include <fstream>
#include <string>

namespace memwire::test_support {

// Mappings of memwire's shared files (SharedBuffer) in this process: its own buffers, plus one
// per connection that mapped a peer's. Shows whether the mapped same-host path was taken.
inline int shared_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);)
    count += line.find("memfd:memwire-shared") != std::string::npos;
  return count;
}

}  // namespace memwire::test_support
