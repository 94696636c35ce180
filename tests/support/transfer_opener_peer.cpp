// A peer process that opens tagged pool transfers and never ends them (transfer_opener.hpp):
// the other side of the owner-bounds tests, one process among several of one user.
//   memwire_transfer_opener tcp|shm CONNECTIONS TRANSFERS [SOURCE-ADDRESS]
// reads the pool's metadata on stdin; SOURCE-ADDRESS: over tcp, the IPv4 address to connect from.
#include <cstdlib>
#include <iostream>

#include "support/transfer_opener.hpp"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: memwire_transfer_opener tcp|shm CONNECTIONS TRANSFERS [SOURCE-ADDRESS]\n";
    return 2;
  }
  return memwire::test_support::hold_open_transfers(
      std::cin, std::cout, argv[1], std::strtoull(argv[2], nullptr, 10),
      std::strtoull(argv[3], nullptr, 10), argc == 5 ? argv[4] : "");
}
