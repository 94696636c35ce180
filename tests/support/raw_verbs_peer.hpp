#pragma once

// A bare RC QP connected to a connector's verbs listener, driven by hand: what an attacker (or
// a peer holding stale metadata) can do without going through memwire's code. It can post raw
// RDMA READ/WRITE with any key, and speak the notices of the verbs protocol itself (Begin,
// then the owner's Keys and Accept). For the verbs tests and the two-guest attack probe.
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "memwire/connector_options.hpp"
#include "memwire/metadata.hpp"
#include "memwire/pool_metadata.hpp"
#include "transport/verbs/verbs_wire.hpp"
#include "util/ids.hpp"

namespace memwire::test_support {

// The owner of the raw-QP tests: verbs alone, keys made as `access` says ("auto", "windows",
// "pd"). A source that keeps faulting is never refused: the tests fault on purpose (hundreds of
// bad connections), and some read the count.
inline ConnectorOptions verbs_owner_options(const std::string& access) {
  ConnectorOptions options;
  options.transports = {"verbs"};
  options.connect_timeout = std::chrono::seconds(5);
  options.rdma.access = access;
  options.rdma.max_access_faults = 0;
  return options;
}

// The owner's verbs listeners as its metadata names them: the offer's address, then rail1,
// ... when it has several.
inline std::vector<std::string> rail_addresses(const RdmaMetadata& metadata) {
  const auto& offer = metadata.endpoint().transports.at(0);
  std::vector<std::string> addresses{offer.address};
  for (int rail = 1;; ++rail) {
    auto found = offer.attributes.find("rail" + std::to_string(rail));
    if (found == offer.attributes.end()) return addresses;
    addresses.push_back(found->second);
  }
}

class RawVerbsPeer {
 public:
  static constexpr std::size_t kReceives = detail::verbs::kNoticeReceives;

  // Connects to `address` ("ip:port"), calling itself `name` in its hello. Throws
  // std::runtime_error when the listener refuses (or is not there). `receives`: how many
  // receives it posts; fewer than kReceives makes a peer that stalls the owner's sends (the
  // owner counts on kReceives, and RC retries receiver-not-ready forever).
  explicit RawVerbsPeer(const std::string& address, const std::string& name = "raw-test-peer",
                        std::size_t receives = kReceives) {
    const auto colon = address.rfind(':');
    const auto host = address.substr(0, colon), port = address.substr(colon + 1);
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* info = nullptr;
    if (rdma_getaddrinfo(host.c_str(), port.c_str(), &hints, &info) != 0)
      throw std::runtime_error("rdma_getaddrinfo " + address);
    ibv_qp_init_attr attributes{};
    attributes.cap.max_send_wr = 8;
    attributes.cap.max_recv_wr = kReceives;
    attributes.cap.max_send_sge = attributes.cap.max_recv_sge = 1;
    attributes.qp_type = IBV_QPT_RC;
    attributes.sq_sig_all = 1;
    const int created = rdma_create_ep(&id_, info, nullptr, &attributes);
    rdma_freeaddrinfo(info);
    if (created != 0) throw std::runtime_error("rdma_create_ep");
    receive_mr_ = rdma_reg_msgs(id_, receive_buffers_.data(), sizeof receive_buffers_);
    if (receive_mr_ == nullptr) {
      rdma_destroy_ep(id_);
      throw std::runtime_error("rdma_reg_msgs");
    }
    for (std::size_t slot = 0; slot < std::min(receives, kReceives); ++slot) post_receive(slot);
    const auto hello = detail::verbs::encode_hello(name, detail::verbs::kConnectPrivateData);
    rdma_conn_param parameters{};
    parameters.private_data = hello.data();
    parameters.private_data_len = static_cast<std::uint8_t>(hello.size());
    parameters.initiator_depth = parameters.responder_resources = 1;
    parameters.retry_count = parameters.rnr_retry_count = 7;
    if (rdma_connect(id_, &parameters) != 0) {
      rdma_dereg_mr(receive_mr_);
      rdma_destroy_ep(id_);
      throw std::runtime_error("rdma_connect " + address + " refused");
    }
  }
  // No rdma_disconnect: on a synchronous id it blocks until the other end answers, which a
  // connector that already dropped us never does. Destroying the id disconnects anyway.
  ~RawVerbsPeer() {
    rdma_dereg_mr(receive_mr_);
    rdma_destroy_ep(id_);
  }
  RawVerbsPeer(const RawVerbsPeer&) = delete;
  RawVerbsPeer& operator=(const RawVerbsPeer&) = delete;

  // Whether the connector disconnected us within `timeout`.
  bool disconnected_within(std::chrono::milliseconds timeout) {
    pollfd readable{id_->channel->fd, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(timeout.count())) != 1) return false;
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(id_->channel, &event) != 0) return false;
    const bool disconnected = event->event == RDMA_CM_EVENT_DISCONNECTED;
    rdma_ack_cm_event(event);
    return disconnected;
  }

  // One SEND of `bytes` to the connector: its status.
  ibv_wc_status send(std::span<const std::byte> bytes) {
    std::vector<std::byte> copy(bytes.begin(), bytes.end());
    ibv_mr* mr = rdma_reg_msgs(id_, copy.data(), copy.size());
    if (mr == nullptr) throw std::runtime_error("rdma_reg_msgs");
    const int posted = rdma_post_send(id_, nullptr, copy.data(), copy.size(), mr, 0);
    const auto completion = posted == 0 ? send_completion() : std::nullopt;
    rdma_dereg_mr(mr);
    if (!completion) throw std::runtime_error("no completion for the raw SEND");
    return completion->status;
  }
  ibv_wc_status send(const detail::verbs::Notice& notice) {
    std::array<std::byte, detail::verbs::kNoticeBytes> bytes{};
    const auto size = detail::verbs::encode(notice, bytes);
    return send(std::span<const std::byte>(bytes.data(), size));
  }

  // The next notice from the connector, or nothing within `timeout` (or on a broken QP).
  std::optional<detail::verbs::Notice> receive(std::chrono::milliseconds timeout) {
    const auto completion = next_completion(id_->recv_cq, id_->recv_cq_channel, timeout);
    if (!completion || completion->status != IBV_WC_SUCCESS) return std::nullopt;
    const auto slot = completion->wr_id;
    std::optional<detail::verbs::Notice> notice;
    try {
      notice = detail::verbs::decode(
          std::span<const std::byte>(receive_buffers_[slot].data(), completion->byte_len));
    } catch (const std::exception&) {
    }
    post_receive(slot);
    // As memwire's connection does: the owner sends no more notices than it has credits for.
    if (++credits_due_ >= 32) {
      detail::verbs::Notice credits;
      credits.type = detail::verbs::NoticeType::Credits;
      credits.credits = static_cast<std::uint16_t>(credits_due_);
      credits_due_ = 0;
      send(credits);
    }
    return notice;
  }

  // What the owner answered a Begin: the keys it granted this QP, or its refusal.
  struct Grant {
    bool accepted = false;
    std::optional<ErrorCode> error;
    std::string text;  // the refusal's reason
    std::vector<std::uint32_t> rkeys;
  };
  // Begins the operation `metadata` describes as memwire's active side would (its key and
  // token, the pairing kind), as transfer `seq`, and collects the owner's answer.
  Grant begin(const RdmaMetadata& metadata, std::uint64_t seq = 1,
              std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (send(notice_for(metadata, detail::verbs::NoticeType::Begin, seq)) != IBV_WC_SUCCESS)
      return {};
    return await_grant(seq, metadata.descriptors().size(), timeout);
  }
  // A pool transfer's Begin (tag `tag`) under the pool's token, as memwire's active side sends
  // it; pool_begin() also collects the owner's answer (one key per region).
  ibv_wc_status send_pool_begin(const PoolMetadata& metadata, std::uint64_t seq,
                                const std::string& tag = "") {
    auto notice = pool_begin_for(metadata, seq, OperationKind::Read);
    notice.tag = tag;
    return send(notice);
  }
  Grant pool_begin(const PoolMetadata& metadata, std::uint64_t seq,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (send_pool_begin(metadata, seq) != IBV_WC_SUCCESS) return {};
    return await_grant(seq, metadata.regions().size(), timeout);
  }

  // A PoolBegin of `kind` under a request grant's metadata: `windows` keys come back, one per
  // window (detail::grant_windows).
  Grant grant_begin(const PoolMetadata& metadata, std::uint64_t seq, OperationKind kind,
                    std::size_t windows,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    if (send(pool_begin_for(metadata, seq, kind)) != IBV_WC_SUCCESS) return {};
    return await_grant(seq, windows, timeout);
  }

  // Done for transfer `seq` of `metadata`'s operation; the owner's Result (empty = success),
  // or nothing when it did not answer.
  // `first_index`: the Done's flag (kDoneWithoutResult: a reader that asks for no Result).
  std::optional<std::optional<ErrorCode>> done(
      const RdmaMetadata& metadata, std::uint64_t seq,
      std::chrono::milliseconds timeout = std::chrono::seconds(20), std::uint32_t first_index = 0) {
    auto notice = notice_for(metadata, detail::verbs::NoticeType::Done, seq);
    notice.first_index = first_index;
    if (send(notice) != IBV_WC_SUCCESS) return std::nullopt;
    while (auto answer = receive(timeout))
      if (answer->type == detail::verbs::NoticeType::Result && answer->seq == seq)
        return answer->error;
    return std::nullopt;
  }

  // One RDMA READ (into `local`) or WRITE (from `local`) against (remote, rkey): its status.
  ibv_wc_status access(bool read, std::span<std::byte> local, std::uint64_t remote,
                       std::uint32_t rkey) {
    ibv_mr* mr = rdma_reg_msgs(id_, local.data(), local.size());
    if (mr == nullptr) throw std::runtime_error("rdma_reg_msgs");
    const int posted = read ? rdma_post_read(id_, nullptr, local.data(), local.size(), mr,
                                             IBV_SEND_SIGNALED, remote, rkey)
                            : rdma_post_write(id_, nullptr, local.data(), local.size(), mr,
                                              IBV_SEND_SIGNALED, remote, rkey);
    const auto completion = posted == 0 ? send_completion() : std::nullopt;
    rdma_dereg_mr(mr);
    if (!completion) throw std::runtime_error("no completion for the raw RDMA request");
    return completion->status;
  }

  // The rkey of a region this peer registers now on the same device: on one host, rxe hands
  // out region indices in sequence (rkey = index << 8 | an 8-bit key), so a region the owner
  // registers between two of these has an index between theirs. probe_window_rkey() does the
  // same for memory windows (their own sequence).
  std::uint32_t probe_region_rkey() {
    std::array<std::byte, 64> bytes{};
    const int access = IBV_ACCESS_REMOTE_READ;  // a variable: ibv_reg_mr's macro mixes enums
    ibv_mr* mr = ibv_reg_mr(id_->pd, bytes.data(), bytes.size(), access);
    if (mr == nullptr) throw std::runtime_error("ibv_reg_mr");
    const auto rkey = mr->rkey;
    ibv_dereg_mr(mr);
    return rkey;
  }
  std::uint32_t probe_window_rkey() {
    ibv_mw* mw = ibv_alloc_mw(id_->pd, IBV_MW_TYPE_2);
    if (mw == nullptr) throw std::runtime_error("ibv_alloc_mw");
    const auto rkey = mw->rkey;
    ibv_dealloc_mw(mw);
    return rkey;
  }

  // A notice of `type` for transfer `seq` of `metadata`'s operation, as memwire's active side
  // sends it.
  static detail::verbs::Notice notice_for(const RdmaMetadata& metadata,
                                          detail::verbs::NoticeType type, std::uint64_t seq) {
    detail::verbs::Notice notice;
    notice.type = type;
    notice.seq = seq;
    notice.key = parse_id(metadata.notification_key()).value_or(Id128{});
    notice.token = parse_id(metadata.token()).value_or(Id128{});
    notice.kind = metadata.operation_kind() == OperationKind::Read ? OperationKind::Read
                                                                   : OperationKind::Write;
    // Done claims every byte the metadata describes, as memwire's active side does.
    notice.bytes = metadata.total_size();
    return notice;
  }

  // A pool transfer's Begin of `kind` under `metadata`'s token.
  static detail::verbs::Notice pool_begin_for(const PoolMetadata& metadata, std::uint64_t seq,
                                              OperationKind kind) {
    detail::verbs::Notice notice;
    notice.type = detail::verbs::NoticeType::PoolBegin;
    notice.seq = seq;
    notice.key = parse_id(metadata.key()).value_or(Id128{});
    notice.token = parse_id(metadata.token()).value_or(Id128{});
    notice.kind = kind;
    notice.generation = metadata.generation();
    return notice;
  }

 private:
  // A request that neither completes nor fails within this ends the attempt: a test must not
  // hang on a QP that the other end stopped answering.
  static constexpr std::chrono::seconds kSendTimeout{30};

  std::optional<ibv_wc> send_completion() {
    return next_completion(id_->send_cq, id_->send_cq_channel, kSendTimeout);
  }

  // The next completion on `cq`, waiting on its channel up to `timeout`.
  static std::optional<ibv_wc> next_completion(ibv_cq* cq, ibv_comp_channel* channel,
                                               std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      ibv_wc completion{};
      int found = ibv_poll_cq(cq, 1, &completion);
      if (found == 0) {
        ibv_req_notify_cq(cq, 0);
        found = ibv_poll_cq(cq, 1, &completion);
      }
      if (found < 0) return std::nullopt;
      if (found == 1) return completion;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd readable{channel->fd, POLLIN, 0};
      if (::poll(&readable, 1, static_cast<int>(left.count())) != 1) return std::nullopt;
      ibv_cq* notified = nullptr;
      void* context = nullptr;
      if (ibv_get_cq_event(channel, &notified, &context) == 0) ibv_ack_cq_events(notified, 1);
    }
  }

  Grant await_grant(std::uint64_t seq, std::size_t descriptors, std::chrono::milliseconds timeout) {
    Grant grant;
    grant.rkeys.resize(descriptors);
    while (auto notice = receive(timeout)) {
      if (notice->seq != seq) continue;
      // Keys notices, and the last keys on the Accept.
      for (std::size_t i = 0; i < notice->rkeys.size(); ++i)
        if (notice->first_index + i < descriptors)
          grant.rkeys[notice->first_index + i] = notice->rkeys[i];
      if (notice->type == detail::verbs::NoticeType::Accept) {
        grant.accepted = !notice->error;
        grant.error = notice->error;
        grant.text = notice->text;
        return grant;
      }
    }
    return grant;
  }

  void post_receive(std::size_t slot) {
    if (rdma_post_recv(id_, reinterpret_cast<void*>(slot), receive_buffers_[slot].data(),
                       receive_buffers_[slot].size(), receive_mr_) != 0)
      throw std::runtime_error("rdma_post_recv");
  }

  rdma_cm_id* id_ = nullptr;
  ibv_mr* receive_mr_ = nullptr;
  std::array<std::array<std::byte, detail::verbs::kNoticeBytes>, kReceives> receive_buffers_{};
  std::size_t credits_due_ = 0;  // receives posted again, not yet returned to the owner
};

}  // namespace memwire::test_support
