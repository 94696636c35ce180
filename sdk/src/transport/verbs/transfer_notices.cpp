#include "transport/verbs/transfer_notices.hpp"

#include <string>

#include "core/active_transfer.hpp"

namespace memwire::detail::verbs {

Notice begin_notice(const OutboundTransfer& leg) {
  Notice notice;
  notice.type = NoticeType::Begin;
  notice.seq = leg.seq;
  notice.key = leg.stripe->transfer->key();
  notice.token = leg.stripe->transfer->token();
  notice.kind = leg.stripe->transfer->kind();
  if (const auto& header = leg.stripe->transfer->request().header) {
    notice.type = NoticeType::PoolBegin;
    notice.generation = header->generation;
    notice.tag = header->tag;
  } else {
    notice.bytes = leg.stripe->transfer->remote().total_size();
    // The transfer, the same on every rail: the owner grants a one-shot operation to one.
    notice.text = std::to_string(leg.stripe->seq);
  }
  return notice;
}

Notice transfer_notice(NoticeType type, std::uint64_t leg_seq, const Stripe& stripe) {
  Notice notice;
  notice.type = type;
  notice.seq = leg_seq;
  notice.key = stripe.transfer->key();
  notice.token = stripe.transfer->token();
  notice.kind = stripe.transfer->kind();
  return notice;
}

Notice abort_notice(std::uint64_t leg_seq, const Stripe& stripe, const Error& error) {
  const auto& header = stripe.transfer->request().header;
  auto notice =
      transfer_notice(header ? NoticeType::PoolAbort : NoticeType::Abort, leg_seq, stripe);
  notice.error = error.code();
  if (header) {
    // The owner may not know this transfer (no Begin: keys cached): the tag tells it which.
    notice.generation = header->generation;
    notice.tag = header->tag;
  } else {
    notice.text = error.what();
  }
  return notice;
}

}  // namespace memwire::detail::verbs
