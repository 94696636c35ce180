// The stream transports' active side: the answers a passive peer sends to a connector that
// reads from it or writes to it. The fuzz target is that peer: a TCP listener the connector
// dials for one begin_read or begin_write; it sends the input as its answers (request ids are
// numbered from 1 on a fresh connection, so a fuzzer finds them), then closes. First input
// byte: bit 0 write instead of read, bit 1 two chunks (two requests and a completion notice)
// instead of one, bit 2 the buffer as 1 KiB descriptors (piece requests of four each). The
// operation must end (complete or fail) and never touch memory outside its buffer.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "loopback.hpp"
#include "memwire/connector.hpp"
#include "memwire/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint16_t port = 0;
  static const int listener = memwire::fuzz::listen_loopback(port);
  if (size == 0) return 0;
  const bool writing = data[0] & 1;
  const bool two_chunks = data[0] & 2;
  const bool pieces = data[0] & 4;
  const std::string_view answers(reinterpret_cast<const char*>(data + 1), size - 1);

  memwire::ConnectorOptions options;
  options.name = "fuzz-active";
  options.transports = {"tcp"};
  options.tcp.connections_per_peer = 1;
  options.tcp.chunk_size = 4096;
  options.connect_timeout = std::chrono::seconds(2);
  memwire::Connector connector(options);

  const std::size_t length = two_chunks ? 8192 : 4096;
  std::vector<std::byte> local(length);
  const std::size_t block = pieces ? 1024 : length;
  std::vector<memwire::RemoteDescriptor> remote_blocks;
  std::vector<memwire::Descriptor> descriptors;
  for (std::size_t at = 0; at < length; at += block) {
    remote_blocks.push_back({memwire::Device{}, 0x10000 + at, block});
    descriptors.emplace_back(local.data() + at, block);
  }
  const memwire::RdmaMetadata remote(
      {.kind = writing ? memwire::OperationKind::Write : memwire::OperationKind::Read,
       .descriptors = std::move(remote_blocks),
       .notification_key = std::string(32, 'a'),
       .endpoint = {"fuzz-passive",
                    "localhost",
                    {{"tcp", "127.0.0.1:" + std::to_string(port), {}, {}}}},
       .token = std::string(32, 'b'),
       .expires_at_ms = 0});
  auto run = [&](auto operation) {
    const int peer = memwire::fuzz::accept_one(listener);
    if (peer < 0) std::abort();
    memwire::fuzz::send_then_half_close(peer, answers);
    // The connection stays open while the connector lives; the operation must end regardless.
    memwire::OperationStatus status;
    try {
      status = operation.wait_for_completion(std::chrono::seconds(10));
    } catch (const memwire::Error&) {  // the operation failed: its error comes as an exception
      status = operation.status();
    }
    if (status == memwire::OperationStatus::InProgress) {
      std::fprintf(stderr, "the operation still runs after its peer's last answer\n");
      std::abort();
    }
    ::close(peer);
  };
  if (writing) {
    run(connector.begin_write(std::move(descriptors), remote));
  } else {
    run(connector.begin_read(remote, std::move(descriptors)));
  }
  return 0;
}
