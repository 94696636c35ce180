#pragma once

#include <cstdint>

namespace memwire::test_support {

// Bytes this process has read so far from the TCP sockets it holds open (TCP_INFO's bytes
// received less what still waits in the socket, for each socket in /proc/self/fd): a way for a
// test to see that a peer's data is being taken in, not merely queued by the kernel.
std::uint64_t tcp_bytes_read();

}  // namespace memwire::test_support
