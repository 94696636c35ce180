// The owner's side of shm on one connection: the Hello's check, the cross-memory copies of
// checked requests (process_vm_readv/writev), and the answers that let the peer copy through
// its own mapping of our SharedBuffer (kMapped): where the requested bytes lie in the file,
// instead of copying them, with the buffer's memfd the first time (kDescriptor). Asked for
// (kMapByDescriptor), and given only after the request was checked like any other.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/registration.hpp"
#include "owner/pool_facts.hpp"
#include "transport/shm/cross_memory.hpp"
#include "transport/shm/shared_memory_index.hpp"
#include "transport/shm/shm_sides.hpp"
#include "transport/stream/stream_connection.hpp"
#include "util/file_descriptor.hpp"

namespace memwire::detail {
namespace {

FrameType answer_type(const FrameHeader& request) {
  return request.type == FrameType::ReadRequest || request.type == FrameType::ReadPiecesRequest ||
                 request.type == FrameType::PoolReadRequest
             ? FrameType::ReadResponse
             : FrameType::WriteResponse;
}

bool writes(const FrameHeader& request) { return answer_type(request) == FrameType::WriteResponse; }

OutFrame mapped_answer(const FrameHeader& request) {
  OutFrame response;
  response.header.type = answer_type(request);
  response.header.request_id = request.request_id;
  response.header.flags = frame_flags::kCrossMemory | frame_flags::kMapped;
  return response;
}

// Where each block lies in `span`, if all of them lie in the file part it names, which begins
// at `span_begin` in this process.
std::optional<std::vector<std::uint64_t>> offsets_in(std::span<const iovec> memory,
                                                     const std::byte* span_begin,
                                                     std::uint64_t span_length) {
  std::vector<std::uint64_t> offsets;
  offsets.reserve(memory.size());
  for (const auto& block : memory) {
    const auto* data = static_cast<const std::byte*>(block.iov_base);
    if (data < span_begin) return std::nullopt;
    const auto offset = static_cast<std::uint64_t>(data - span_begin);
    if (offset > span_length || block.iov_len > span_length - offset) return std::nullopt;
    offsets.push_back(offset);
  }
  return offsets;
}

void check(const std::optional<CopyFailure>& failure) {
  if (failure) throw Error(ErrorCode::Transport, failure->what);
}

class ShmOwnerSide final : public SameHostOwner {
 public:
  ShmOwnerSide(int peer_process, bool direct_reads)
      : peer_process_(peer_process), direct_reads_(direct_reads) {}

  void check_hello(const FrameHeader& /*hello*/, int sender) override {
    if (sender != peer_process_)
      throw Error(ErrorCode::AccessDenied,
                  sender == 0 ? std::string("a cross-memory Hello without its sender's credentials")
                  : sender < 0
                      ? std::string("a cross-memory Hello sent by more than one process")
                      : "a cross-memory Hello sent by process " + std::to_string(sender) +
                            ", not by " + std::to_string(peer_process_) + ", which connected");
    // Whether the kernel lets us copy to and from it (the ptrace rules process_vm_readv/writev
    // apply), asked without touching its memory: opening its memory file applies them.
    const std::string path = "/proc/" + std::to_string(peer_process_) + "/mem";
    const int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int error = errno;
    const FileDescriptor memory(opened);
    if (!memory && (error == EACCES || error == EPERM))
      throw Error(ErrorCode::AccessDenied,
                  "cross-memory attach refused: " + path + ": " + std::strerror(error));
    // Another failure (no /proc here) says nothing of the rules: the first copy will.
  }
  bool offers_direct_reads() const override { return direct_reads_; }

  void copy_to_peer(std::uint64_t theirs, const std::byte* ours, std::size_t length) override {
    check(copy_to_process(peer_process_, theirs, ours, length));
  }
  void copy_from_peer(std::uint64_t theirs, std::byte* ours, std::size_t length) override {
    check(copy_from_process(peer_process_, theirs, ours, length));
  }
  void copy_to_peer(std::span<const iovec> theirs, std::span<const iovec> ours) override {
    check(copy_to_process(peer_process_, theirs, ours));
  }
  void copy_from_peer(std::span<const iovec> theirs, std::span<const iovec> ours) override {
    check(copy_from_process(peer_process_, theirs, ours));
  }

  bool answer_mapped(StreamConnection& connection, const FrameHeader& request,
                     const std::byte* data) override;
  bool answer_mapped_pieces(StreamConnection& connection, const FrameHeader& request,
                            const Registration& registration, bool under_request_grant,
                            std::span<const iovec> memory) override;

 private:
  // A mapped answer names SharedBuffer `buffer`: its memfd goes with it unless this connection
  // was given it (for that access) already. False when it cannot be given (over the limit, the
  // buffer closed, or sealed for the other access: share_shared_buffer): the request is copied
  // as usual. `peers_may_write`: whether the registration answered lets peers write it.
  bool give_buffer(OutFrame& response, std::uint64_t buffer, bool peers_may_write);

  const int peer_process_;
  const bool direct_reads_;
  // The SharedBuffers (number, writable) whose memfd this connection's peer was given.
  std::set<std::pair<std::uint64_t, bool>> buffers_given_;
};

bool ShmOwnerSide::give_buffer(OutFrame& response, std::uint64_t buffer, bool peers_may_write) {
  // The peer maps what it reads read-only: it gets no descriptor it could write through.
  const bool writable =
      response.header.type == FrameType::WriteResponse;  // implies peers_may_write
  if (buffers_given_.contains({buffer, writable})) return true;
  if (buffers_given_.size() >= kMaxSharedPerConnection) {
    // Room from the buffers closed since: the peer lets go of them before it takes a new one.
    std::erase_if(buffers_given_,
                  [](const auto& given) { return !shared_buffer_live(given.first); });
    if (buffers_given_.size() >= kMaxSharedPerConnection) return false;  // copied instead
  }
  response.passed = share_shared_buffer(buffer, writable, peers_may_write);
  if (!response.passed) return false;
  response.header.flags |= frame_flags::kDescriptor;
  buffers_given_.insert({buffer, writable});
  return true;
}

bool ShmOwnerSide::answer_mapped(StreamConnection& connection, const FrameHeader& request,
                                 const std::byte* data) {
  if ((request.flags & frame_flags::kMapByDescriptor) == 0) return false;
  auto location = find_shared(data, request.length);
  if (!location) return false;
  auto response = mapped_answer(request);
  // A one-shot operation is read or written, never both: peers may write what they write.
  if (!give_buffer(response, location->buffer, writes(request))) return false;
  response.text.assign(reinterpret_cast<const char*>(&*location), sizeof *location);
  // Never completes here, even for kCompletes: the bytes move after this answer, and the
  // active side's notice says when they have.
  connection.send(std::move(response));
  return true;
}

bool ShmOwnerSide::answer_mapped_pieces(StreamConnection& connection, const FrameHeader& request,
                                        const Registration& registration, bool under_request_grant,
                                        std::span<const iovec> memory) {
  if ((request.flags & frame_flags::kMapByDescriptor) == 0 || memory.empty()) return false;
  const auto* first = static_cast<const std::byte*>(memory.front().iov_base);
  std::optional<SharedLocation> location;
  const std::byte* span_begin = nullptr;
  SharedSpan span;
  if (registration.pool()) {
    // Not when the owner must know the bytes are in before it goes on: a request grant's
    // release waits for them, and a tagged write's tag is delivered once they landed.
    if (under_request_grant || (is_write_request(request.type) && as_pool(request).tag_bytes != 0))
      return false;
    // The peer maps the run of blocks the first one lies in, nothing beside: a run that starts
    // or ends inside a page would show it bytes that are no block's.
    static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const auto run = block_run_holding(registration, first, memory.front().iov_len);
    if (run.empty() || reinterpret_cast<std::uintptr_t>(run.data()) % page != 0 ||
        run.size() % page != 0)
      return false;
    location = find_shared(run.data(), run.size());
    if (!location || location->offset % page != 0) return false;
    span_begin = run.data();
    span = {location->buffer, location->file_size, location->offset, run.size()};
  } else {
    // A one-shot operation's: the whole buffer, as for a single range (answer_mapped).
    location = find_shared(first, memory.front().iov_len);
    if (!location) return false;
    span_begin = first - location->offset;
    span = {location->buffer, location->file_size, 0, location->file_size};
  }
  const auto offsets = offsets_in(memory, span_begin, span.length);
  if (!offsets) return false;  // not all in that span: copied as usual
  auto response = mapped_answer(request);
  const bool writable = registration.pool() ? peers_may_write(registration) : writes(request);
  if (!give_buffer(response, span.buffer, writable)) return false;
  response.text.reserve(sizeof span + offsets->size() * sizeof(std::uint64_t));
  response.text.append(reinterpret_cast<const char*>(&span), sizeof span);
  response.text.append(reinterpret_cast<const char*>(offsets->data()),
                       offsets->size() * sizeof(std::uint64_t));
  // No completion here (a one-shot's notice follows), no tag (a read's PoolEnd comes once the
  // peer copied; a tagged write is never answered so).
  connection.send(std::move(response));
  return true;
}

}  // namespace

std::unique_ptr<SameHostOwner> make_shm_owner_side(int peer_process, bool direct_reads) {
  return std::make_unique<ShmOwnerSide>(peer_process, direct_reads);
}

}  // namespace memwire::detail
