#pragma once

#include <cstdint>

namespace memwire::test_support {

// Bytes this process has received so far on the TCP sockets it holds open (TCP_INFO of each
// socket in /proc/self/fd): a way for a test to see that a peer's data is arriving.
std::uint64_t tcp_bytes_received();

}  // namespace memwire::test_support
