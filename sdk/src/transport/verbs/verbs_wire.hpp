#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/limits.hpp"
#include "memwire/status.hpp"
#include "util/ids.hpp"

namespace memwire::detail::verbs {

// The control messages of the verbs transport, carried as SENDs on the data QP. An active
// transfer announces itself (Begin: the passive side checks key, token and kind before a byte
// moves; a one-shot operation is granted to the first transfer to begin it, named in the
// Begin's text, and refused to any other), and the passive side grants that connection, and it
// alone, remote keys for the registration (Keys notices as many as the descriptors need, the
// last keys on Accept). The active side moves its bytes with RDMA READ/WRITE under those keys,
// then sends Done; the passive side ends the grant, completes the registration and answers
// with Result, and only then does a WRITE succeed. A one-shot READ succeeds on its own READ
// completions and its Done asks for no Result (kDoneWithoutResult). Abort is the active side's
// error notice. The metadata carries no remote key.
// Every notice also hands back receive credits: a side sends no more notices than the peer has
// receives posted (a SEND that meets no receive draws an RNR NAK, and rxe has broken QPs on
// the retries). Credits is a notice with nothing else, for a side that has no answer to send.
enum class NoticeType : std::uint8_t {
  Begin = 1,
  Accept = 2,
  Done = 3,
  Result = 4,
  Abort = 5,
  Keys = 6,
  Credits = 7,
  // A transfer between pools (docs/PROTOCOL.md): PoolBegin asks for the pool's keys on this
  // connection (answered by Accept), PoolDone ends the transfer and delivers its tag (answered
  // by Result), PoolAbort says it failed. Each carries the generation and the tag.
  PoolBegin = 8,
  PoolDone = 9,
  PoolAbort = 10,
};
inline constexpr NoticeType kLastNoticeType = NoticeType::PoolAbort;
inline bool is_pool_notice(NoticeType type) {
  return type == NoticeType::PoolBegin || type == NoticeType::PoolDone ||
         type == NoticeType::PoolAbort;
}

struct Notice {
  NoticeType type = NoticeType::Begin;
  std::uint64_t seq = 0;  // the active side's transfer number on this connection
  Id128 key{};
  Id128 token{};
  OperationKind kind = OperationKind::Unspecified;  // Begin
  std::optional<ErrorCode> error;                   // Accept, Result, Abort; empty = success
  std::string text;                                 // why, when `error` is set
  std::uint32_t first_index = 0;                    // Keys, Accept: the descriptor of rkeys[0]
  std::vector<std::uint32_t> rkeys;                 // Keys, Accept: one per descriptor onwards
  std::uint16_t credits = 0;  // receives the sender posted again since its last notice
  std::uint64_t bytes = 0;    // Begin, Done: what the active side moves (all that is offered?)
  // Pool notices. On the wire `generation` takes the place of `bytes` and `tag` that of `text`:
  // the type says which a notice carries, and decode() fills the field of that name.
  std::uint64_t generation = 0;  // of the pool metadata the transfer uses
  std::string tag;               // the transfer's (empty: untagged), at most kMaxTag, no NUL

  static constexpr std::size_t kMaxText = 190;
  static constexpr std::size_t kMaxTag = memwire::kMaxTagBytes;
  static constexpr std::size_t kMaxKeys = 47;  // per Keys notice (a notice carries no text then)
};

// A Done with first_index kDoneWithoutResult ends a one-shot READ whose reader completed on its
// own work completions (its bytes are in its memory; the owner's memory was only read): the
// owner completes the operation and answers no Result, which would cost a round trip and
// tell the reader nothing it could act on. A WRITE keeps its Result: the writer succeeds only
// once the owner has taken its bytes.
inline constexpr std::uint32_t kDoneWithoutResult = 2;

// Every notice fits one receive buffer of this size.
inline constexpr std::size_t kNoticeBytes = 256;
// Receives each side posts for the peer's notices: the credits each side starts with.
inline constexpr unsigned kNoticeReceives = 128;

// Sets the credits of an encoded notice (stamped when it is posted, not when it is queued).
void stamp_credits(std::span<std::byte> encoded, std::uint16_t credits);

// Writes `notice` (text cut at kMaxText; rkeys, at most kMaxKeys, only without text) into
// `out`; returns the bytes used.
std::size_t encode(const Notice& notice, std::span<std::byte, kNoticeBytes> out);
// Throws Error{Protocol} on anything malformed: the peer is not speaking this protocol.
Notice decode(std::span<const std::byte> in);

// rdma_cm private data of a connect request and of its accept: who is on the other end.
// Private data limits of an RC connect request and of its accept on rdma_cm over IB/RoCE.
inline constexpr std::size_t kConnectPrivateData = 56;
inline constexpr std::size_t kAcceptPrivateData = 196;
std::vector<std::byte> encode_hello(std::string_view connector, std::size_t limit);
std::optional<std::string> decode_hello(const void* data, std::size_t length);

}  // namespace memwire::detail::verbs
