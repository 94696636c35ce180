#include "transport/verbs/verbs_connection.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "memwire/error.hpp"

namespace memwire::detail::verbs {
namespace {

constexpr unsigned kSendDepth = 256;
constexpr unsigned kReceiveSlots = kNoticeReceives;
constexpr unsigned kReservedForNotices = 64;
// The peer's last receives are kept for Credits notices, so that two sides that each wait
// for credits can always tell the other what they have posted again.
constexpr unsigned kCreditsReserve = 2;
// A side with nothing to answer returns its credits on their own once this many are due.
constexpr unsigned kCreditsDue = kReceiveSlots / 4;
// Work requests of notices and binds posted together at most.
constexpr unsigned kChain = 16;
// Notices queued for a peer that returns no credits: past this the peer is not draining them.
constexpr std::size_t kMaxWaitingNotices = 16384;

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorCode::Transport, what + ": " + std::strerror(errno));
}

}  // namespace

Connection::Connection(std::shared_ptr<const VerbsDevice> device, ibv_comp_channel* channel,
                       CmId id, bool outgoing_, std::string peer_, std::string address_)
    : outgoing(outgoing_),
      peer(std::move(peer_)),
      address(std::move(address_)),
      device_(std::move(device)),
      channel_(channel),
      // No device: a connection that is only an identity (tests of the sides without RDMA).
      send_depth_(device_ ? std::min<unsigned>(kSendDepth, static_cast<unsigned>(std::max(
                                                               device_->max_queue_depth(), 4)))
                          : kSendDepth),
      reserved_(std::min(kReservedForNotices, send_depth_ / 2)),
      credits_(send_depth_),
      id_(std::move(id)) {}

std::uint64_t Connection::next_serial() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

Connection::~Connection() {
  // The QP goes before its CQ: close() first, then the members in reverse order.
  close();
}

void Connection::use_own_protection_domain() {
  own_pd_.reset(ibv_alloc_pd(device_->context()), [](ibv_pd* pd) { ibv_dealloc_pd(pd); });
  if (!own_pd_) fail("ibv_alloc_pd");
}

void Connection::create_queue_pair() {
  if (id_->verbs != device_->context())
    throw Error(ErrorCode::Transport,
                "peer " + address + " is not reachable through " + device_->name());
  ibv_pd* pd = own_pd_ ? own_pd_.get() : device_->pd();
  const unsigned slots = kReceiveSlots + reserved_;
  buffers_ = std::make_unique<std::byte[]>(slots * kNoticeBytes);
  buffers_mr_ =
      device_->register_memory(pd, buffers_.get(), slots * kNoticeBytes, IBV_ACCESS_LOCAL_WRITE);
  const int entries =
      std::min<int>(static_cast<int>(send_depth_ + kReceiveSlots), device_->max_cq_entries());
  cq_.reset(ibv_create_cq(device_->context(), entries, this, channel_, 0));
  if (!cq_) fail("ibv_create_cq");
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) fail("ibv_req_notify_cq");

  ibv_qp_init_attr attributes{};
  attributes.qp_context = this;
  attributes.send_cq = cq_.get();
  attributes.recv_cq = cq_.get();
  attributes.qp_type = IBV_QPT_RC;
  attributes.sq_sig_all = 0;
  attributes.cap.max_send_wr = send_depth_;
  attributes.cap.max_recv_wr = kReceiveSlots;
  attributes.cap.max_send_sge = 1;
  attributes.cap.max_recv_sge = 1;
  if (rdma_create_qp(id_.get(), pd, &attributes) != 0) fail("rdma_create_qp");

  for (unsigned slot = 0; slot < kReceiveSlots; ++slot)
    if (!post_receive(wr_id(Tag::Receive, slot))) fail("ibv_post_recv");
  for (unsigned slot = kReceiveSlots; slot < slots; ++slot) free_send_slots_.push_back(slot);
}

bool Connection::repost_receive(std::uint64_t id) {
  if (!post_receive(id)) return false;
  ++credits_due_;
  return true;
}

bool Connection::on_credits(std::uint16_t returned) {
  // More than were ever taken is the peer's mistake; counting them would only let this side
  // overrun the peer's receives.
  peer_receives_ = std::min(peer_receives_ + returned, kReceiveSlots);
  return flush();
}

bool Connection::return_credits() {
  if (state != State::Established || credits_due_ < kCreditsDue || !waiting_.empty()) return true;
  Notice credits;
  credits.type = NoticeType::Credits;
  return send(credits);
}

bool Connection::post_receive(std::uint64_t id) {
  const auto slot = value_of(id);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(buffers_.get() + slot * kNoticeBytes);
  sge.length = static_cast<std::uint32_t>(kNoticeBytes);
  sge.lkey = buffers_mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(id_->qp, &wr, &bad) == 0;
}

std::span<const std::byte> Connection::received(std::uint64_t id, std::uint32_t length) const {
  const auto slot = value_of(id);
  if (slot >= kReceiveSlots) return {};
  return {buffers_.get() + slot * kNoticeBytes, std::min<std::size_t>(length, kNoticeBytes)};
}

bool Connection::send(const Notice& notice) {
  if (waiting_.size() >= kMaxWaitingNotices) return false;
  Waiting message{};
  message.size = encode(notice, std::span<std::byte, kNoticeBytes>(message.bytes));
  message.credits_only = notice.type == NoticeType::Credits;
  waiting_.push_back(message);
  return flush();
}

bool Connection::send_grant(std::uint64_t seq, const std::shared_ptr<AccessGrant>& grant,
                            bool bind) {
  // The binds first: on an RC QP the work requests run in order, so the windows are bound
  // before the keys reach the peer.
  // One entry for all of them, however many descriptors: it stays first until every window
  // is bound.
  if (bind && grant->binds()) {
    Waiting binds{};
    binds.grant = grant;
    binds.bind = true;
    waiting_.push_back(std::move(binds));
  }
  // The keys in notices of kMaxKeys, the last of them the Accept itself: one SEND for an
  // operation of up to kMaxKeys descriptors.
  const auto& rkeys = grant->rkeys();
  const auto chunk = [&](NoticeType type, std::size_t first) {
    Notice notice;
    notice.type = type;
    notice.seq = seq;
    notice.first_index = static_cast<std::uint32_t>(first);
    notice.rkeys.assign(rkeys.begin() + static_cast<std::ptrdiff_t>(first),
                        rkeys.begin() + static_cast<std::ptrdiff_t>(
                                            std::min(rkeys.size(), first + Notice::kMaxKeys)));
    return notice;
  };
  const std::size_t last =
      rkeys.empty() ? 0 : (rkeys.size() - 1) / Notice::kMaxKeys * Notice::kMaxKeys;
  for (std::size_t first = 0; first < last; first += Notice::kMaxKeys) {
    Waiting message{};
    message.size =
        encode(chunk(NoticeType::Keys, first), std::span<std::byte, kNoticeBytes>(message.bytes));
    waiting_.push_back(std::move(message));
  }
  const auto accept = chunk(NoticeType::Accept, last);
  Waiting message{};
  message.size = encode(accept, std::span<std::byte, kNoticeBytes>(message.bytes));
  message.grant = grant;
  message.seq = seq;
  waiting_.push_back(std::move(message));
  return flush();
}

bool Connection::establish() {
  state = State::Established;
  return flush();
}

bool Connection::flush() {
  // What can go now goes in one post: a grant's binds and its Accept, or many notices, cost
  // one call into the device (with rxe, into the kernel) instead of one each.
  std::array<ibv_send_wr, kChain> chain{};
  std::array<ibv_sge, kChain> elements{};
  unsigned count = 0;
  while (state == State::Established && !waiting_.empty() && credits_ > 0) {
    auto& message = waiting_.front();
    if (message.bind) {
      if (prepare_bind(message, chain[count])) ++count;
      if (message.window >= message.grant->window_count()) waiting_.pop_front();
    } else {
      if (free_send_slots_.empty()) break;
      // Only a Credits notice may take the peer's last receives.
      if (peer_receives_ <= (message.credits_only ? 0 : kCreditsReserve)) break;
      prepare_control(message, chain[count], elements[count]);
      ++count;
      waiting_.pop_front();
    }
    if (count == kChain) {
      if (!post_chain(chain.data(), count)) return false;
      count = 0;
    }
  }
  return post_chain(chain.data(), count);
}

bool Connection::post_chain(ibv_send_wr* chain, unsigned count) {
  if (count == 0) return true;
  for (unsigned i = 0; i + 1 < count; ++i) chain[i].next = &chain[i + 1];
  chain[count - 1].next = nullptr;
  ibv_send_wr* bad = nullptr;
  // On failure the connection fails: its close releases what the chain's entries held.
  return ibv_post_send(id_->qp, chain, &bad) == 0;
}

bool Connection::prepare_bind(Waiting& message, ibv_send_wr& wr) {
  wr = {};
  // A grant that ended binds nothing more.
  if (!message.grant->prepare_bind(message.window++, wr)) return false;
  wr.wr_id = wr_id(Tag::Bind, next_bind_++ & ((std::uint64_t{1} << 56) - 1));
  --credits_;
  in_flight_.push_back({wr.wr_id, 1});
  binding_[wr.wr_id] = message.grant;
  return true;
}

void Connection::prepare_control(const Waiting& message, ibv_send_wr& wr, ibv_sge& sge) {
  std::array<std::byte, kNoticeBytes> refusal;
  std::span<const std::byte> bytes(message.bytes.data(), message.size);
  if (message.grant && message.grant->invalidated()) {
    // The owner ended the operation before its Accept left: the peer learns so, rather than
    // getting keys that no longer work.
    Notice refused;
    refused.type = NoticeType::Accept;
    refused.seq = message.seq;
    refused.error = ErrorCode::Cancelled;
    refused.text = "the operation ended on the owner's side";
    bytes = {refusal.data(), encode(refused, std::span<std::byte, kNoticeBytes>(refusal))};
  }
  const auto slot = free_send_slots_.front();
  free_send_slots_.pop_front();
  std::byte* buffer = buffers_.get() + slot * kNoticeBytes;
  std::memcpy(buffer, bytes.data(), bytes.size());
  const auto returned = static_cast<std::uint16_t>(std::min<unsigned>(credits_due_, 0xffff));
  stamp_credits({buffer, bytes.size()}, returned);
  sge = {};
  sge.addr = reinterpret_cast<std::uintptr_t>(buffer);
  sge.length = static_cast<std::uint32_t>(bytes.size());
  sge.lkey = buffers_mr_->lkey;
  wr = {};
  wr.wr_id = wr_id(Tag::Control, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  --credits_;
  --peer_receives_;
  credits_due_ -= returned;
  in_flight_.push_back({wr.wr_id, 1});
}

bool Connection::notices_pending() const noexcept {
  return !waiting_.empty() ||
         std::any_of(in_flight_.begin(), in_flight_.end(),
                     [](const Signalled& entry) { return tag_of(entry.id) == Tag::Control; });
}

unsigned Connection::data_credits() const noexcept {
  return credits_ > reserved_ ? credits_ - reserved_ : 0;
}

bool Connection::post_data(ibv_send_wr* first, unsigned count) {
  ibv_send_wr* bad = nullptr;
  if (count == 0 || count > data_credits() || ibv_post_send(id_->qp, first, &bad) != 0)
    return false;
  credits_ -= count;
  auto* last = first;
  while (last->next != nullptr) last = last->next;
  in_flight_.push_back({last->wr_id, count});
  return true;
}

bool Connection::on_send_completion(std::uint64_t id) {
  // Send completions arrive in posting order; a signalled one also retires the unsignalled
  // requests posted before it.
  while (!in_flight_.empty()) {
    const auto entry = in_flight_.front();
    in_flight_.pop_front();
    credits_ += entry.work_requests;
    if (tag_of(entry.id) == Tag::Control) free_send_slots_.push_back(value_of(entry.id));
    if (tag_of(entry.id) == Tag::Bind)
      if (auto bound = binding_.extract(entry.id)) bound.mapped()->bind_completed();
    if (entry.id == id) break;
  }
  return flush();
}

void Connection::close() {
  if (state == State::Closed) return;
  const bool connected = state == State::Established || state == State::Connecting;
  state = State::Closed;
  if (!id_) return;
  // Tells the peer at once (it sees DISCONNECTED) and moves the QP to the error state.
  if (connected) rdma_disconnect(id_.get());
  // The QP is in the error state: no bind of it runs any more, and its windows go before it
  // does (a type-2 window holds its QP: destroying a QP with windows bound waits for them).
  waiting_.clear();
  for (auto& [id, grant] : binding_) grant->connection_closed();
  binding_.clear();
  for (auto& [key, entry] : inbound)
    if (entry.grant) entry.grant->connection_closed();
  // Destroying the QP guarantees the device touches no memory for it any more.
  if (id_->qp != nullptr) rdma_destroy_qp(id_.get());
}

std::string describe(const Connection& connection) {
  return "peer " + (connection.peer.empty() ? std::string("?") : connection.peer) + " at " +
         connection.address;
}

}  // namespace memwire::detail::verbs
