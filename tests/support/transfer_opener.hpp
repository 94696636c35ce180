#pragma once

// A hostile peer of a pool over tcp or shm, speaking raw stream frames: each connection opens
// tagged pool writes (1 byte each, the longest tag) and never ends them, so that the owner holds
// a record of each while the connection lives. What a peer can make an owner hold: the other
// side of the owner-bounds tests and of bench/owner_memory.cpp. No GoogleTest: a peer program
// uses it too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/limits.hpp"
#include "memwire/pool_metadata.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/ids.hpp"

namespace memwire::test_support {

// What one connection's attempt got: transfers the owner admitted, the first refusal's text, and
// whether the owner closed the connection.
struct OpenedTransfers {
  std::size_t opened = 0;
  std::size_t refused = 0;
  std::string first_refusal;
  bool closed = false;
};

class TransferOpener {
 public:
  // Connects over `transport` ("tcp" or "shm": the pool's endpoint must offer it) and says hello
  // as `name` (a cross-memory hello over shm, sent with this process's credentials).
  // `source`: over tcp, the local IPv4 address to connect from (127.0.0.2: another peer to an
  // owner on loopback); empty: the kernel's choice.
  TransferOpener(const PoolMetadata& pool, const std::string& transport, const std::string& name,
                 const std::string& source = {})
      : key_(*parse_id(pool.key())),
        token_(*parse_id(pool.token())),
        generation_(static_cast<std::uint32_t>(pool.generation())) {
    std::string address;
    for (const auto& offer : pool.endpoint().transports)
      if (offer.name == transport) address = offer.address;
    if (address.empty()) throw Error(ErrorCode::InvalidArgument, "the pool offers no " + transport);
    detail::FrameHeader hello;
    hello.type = detail::FrameType::Hello;
    hello.length = name.size();
    if (transport == "shm") {
      socket_ = detail::connect_unix(address.substr(1));
      hello.flags = detail::frame_flags::kCrossMemory;
    } else {
      socket_ = source.empty()
                    ? detail::connect_tcp(detail::parse_host_port(address), std::chrono::seconds(5))
                    : connect_from(source, detail::parse_host_port(address));
    }
    iovec parts[2] = {{&hello, sizeof hello}, {const_cast<char*>(name.data()), name.size()}};
    if (!(transport == "shm" ? detail::send_all_as_this_process(socket_.get(), parts, 2)
                             : detail::send_all(socket_.get(), parts, 2)))
      throw Error(ErrorCode::PeerLost, "the owner closed the connection at its hello");
    if (transport == "shm") {
      std::string why;
      if (!answer(why) || !why.empty())
        throw Error(ErrorCode::PeerLost, "the owner refused the shm hello: " + why);
    }
  }

  // Opens `count` transfers numbered from `first`, `batch` requests sent before their answers
  // are read; stops at the first refusal the owner closes the connection after.
  OpenedTransfers open(std::size_t count, std::uint64_t first = 1, std::size_t batch = 256) {
    OpenedTransfers result;
    for (std::size_t done = 0; done < count && !result.closed;) {
      const auto now = std::min(batch, count - done);
      std::string frames;
      for (std::size_t n = 0; n < now; ++n) frames += request(first + done + n);
      iovec all{frames.data(), frames.size()};
      if (!detail::send_all(socket_.get(), &all, 1)) {
        result.closed = true;
        break;
      }
      for (std::size_t n = 0; n < now; ++n) {
        std::string why;
        if (!answer(why)) {
          result.closed = true;
          break;
        }
        if (why.empty()) {
          ++result.opened;
        } else {
          if (result.refused++ == 0) result.first_refusal = why;
        }
      }
      done += now;
    }
    return result;
  }

  int socket() const noexcept { return socket_.get(); }

 private:
  static detail::FileDescriptor connect_from(const std::string& source,
                                             const detail::HostPort& target) {
    detail::FileDescriptor socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from{}, to{};
    from.sin_family = to.sin_family = AF_INET;
    to.sin_port = htons(target.port);
    if (::inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
        ::inet_pton(AF_INET, target.host.c_str(), &to.sin_addr) != 1)
      throw Error(ErrorCode::InvalidArgument, "not IPv4 addresses: " + source + ", " + target.host);
    if (::bind(socket.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        ::connect(socket.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
      throw Error(ErrorCode::PeerLost,
                  "connect from " + source + ": " + std::string(std::strerror(errno)));
    return socket;
  }

  // A 1-byte tagged write of block 0, in transfer `transfer`: header, piece, tag, byte.
  std::string request(std::uint64_t transfer) const {
    auto tag = "opener/" + std::to_string(transfer);
    tag.resize(kMaxTagBytes, '.');  // the longest tag: the most an owner keeps per transfer
    detail::FramePiece piece{0, 0, 0, 1, 0};
    detail::PoolFrameHeader header;
    header.type = detail::FrameType::PoolWriteRequest;
    header.request_id = transfer;
    header.piece_count = 1;
    header.generation = generation_;
    header.transfer = transfer;
    header.length = 1;
    header.tag_bytes = static_cast<std::uint32_t>(tag.size());
    header.key = key_;
    header.token = token_;
    const auto frame = detail::as_frame(header);
    std::string bytes(reinterpret_cast<const char*>(&frame), sizeof frame);
    bytes.append(reinterpret_cast<const char*>(&piece), sizeof piece);
    bytes += tag;
    bytes += 'x';
    return bytes;
  }

  // One answer: false when the connection closed; `why` is its error text (empty when ok).
  bool answer(std::string& why) {
    detail::FrameHeader header;
    if (!detail::receive_all(socket_.get(), &header, sizeof header)) return false;
    if (header.length > detail::FrameHeader::kMaxText) return false;
    std::string text(header.length, '\0');
    if (!detail::receive_all(socket_.get(), text.data(), text.size())) return false;
    if (header.code != 0) why = text.empty() ? "error code " + std::to_string(header.code) : text;
    return true;
  }

  detail::FileDescriptor socket_;
  Id128 key_, token_;
  std::uint32_t generation_ = 0;
};

// A peer process's part: reads the pool's metadata from `in`, opens `connections` connections
// over `transport` (from `source` over tcp, when given) and `transfers` transfers on each (the
// longest Hello name too; 0: Hello-only connections), prints one line per connection to `out`
// ("OPENED REFUSED CLOSED FIRST-REFUSAL", "-" for none), then "done", and holds them all until
// `in` says "leave" (or ends).
inline int hold_open_transfers(std::istream& in, std::ostream& out, const std::string& transport,
                               std::size_t connections, std::size_t transfers,
                               const std::string& source = {}) {
  std::string line;
  std::getline(in, line);
  const auto pool = PoolMetadata::from_json(line);
  std::vector<TransferOpener> held;
  for (std::size_t c = 0; c < connections; ++c) {
    auto name = "opener-" + std::to_string(::getpid()) + "-" + std::to_string(c) + "-";
    name.resize(kMaxTagBytes, 'n');  // the longest name: the owner keeps it with each transfer
    try {
      auto& opener = held.emplace_back(pool, transport, name, source);
      const auto got = opener.open(transfers);
      out << got.opened << ' ' << got.refused << ' ' << got.closed << ' '
          << (got.first_refusal.empty() ? "-" : got.first_refusal) << std::endl;
    } catch (const Error& error) {
      out << "0 0 1 " << error.what() << std::endl;
    }
  }
  out << "done" << std::endl;
  while (std::getline(in, line) && line != "leave") {
  }
  return 0;
}

// What hold_open_transfers's lines add up to.
struct HeldTransfers {
  std::size_t opened = 0, refused = 0, closed = 0;
  std::string first_refusal;
  // Adds one of its lines; false for "done" (or a line it does not know).
  bool add(const std::string& line) {
    std::size_t o = 0, r = 0, c = 0;
    char rest[512] = {};
    if (line == "done" || std::sscanf(line.c_str(), "%zu %zu %zu %511[^\n]", &o, &r, &c, rest) < 3)
      return false;
    opened += o, refused += r, closed += c;
    if (first_refusal.empty() && std::string(rest) != "-") first_refusal = rest;
    return true;
  }
};

}  // namespace memwire::test_support
