// A peer process that opens tagged pool transfers and never ends them (transfer_opener.hpp):
// the other side of the owner-bounds tests, one process among several of one user.
//   memwire_transfer_opener tcp|shm CONNECTIONS TRANSFERS   reads the pool's metadata on stdin
#include <cstdlib>
#include <iostream>

#include "support/transfer_opener.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: memwire_transfer_opener tcp|shm CONNECTIONS TRANSFERS\n";
    return 2;
  }
  return memwire::test_support::hold_open_transfers(std::cin, std::cout, argv[1],
                                                    std::strtoull(argv[2], nullptr, 10),
                                                    std::strtoull(argv[3], nullptr, 10));
}
