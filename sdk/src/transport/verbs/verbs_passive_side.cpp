#include "transport/verbs/verbs_passive_side.hpp"

#include <algorithm>

#include "registration.hpp"
#include "transport/verbs/verbs_engine.hpp"

namespace memwire::detail::verbs {

void VerbsPassiveSide::on_notice(Connection& connection, const Notice& notice) {
  switch (notice.type) {
    case NoticeType::Begin:
      on_begin(connection, notice);
      return;
    case NoticeType::Done:
      on_done(connection, notice);
      return;
    case NoticeType::Abort:
      on_abort(connection, notice);
      return;
    case NoticeType::Accept:
    case NoticeType::Result:
      return;  // the active side's
  }
}

void VerbsPassiveSide::reply(Connection& connection, NoticeType type, std::uint64_t seq,
                             std::optional<ErrorCode> error, std::string text) {
  Notice notice;
  notice.type = type;
  notice.seq = seq;
  notice.error = error;
  notice.text = std::move(text);
  engine_.send(connection, notice);
}

void VerbsPassiveSide::on_begin(Connection& connection, const Notice& notice) {
  auto registration = registrations_->find(notice.key);
  if (!registration) {
    reply(connection, NoticeType::Accept, notice.seq, ErrorCode::NotFound,
          "no live operation with this key (completed, cancelled or never offered)");
    return;
  }
  try {
    // Token, kind, expiry and liveness, before a byte moves. The pin is dropped at once: the
    // device moves the bytes and the memory regions are what guards the memory.
    const auto& descriptors = registration->descriptors();
    registration->check_access(notice.token, notice.kind, 0, 0, descriptors.front().size(),
                               "verbs");
  } catch (const Error& error) {
    reply(connection, NoticeType::Accept, notice.seq, error.code(), error.what());
    return;
  }
  // Remembered so that losing this connection fails the operation.
  connection.inbound[notice.key] = registration;
  reply(connection, NoticeType::Accept, notice.seq);
}

void VerbsPassiveSide::on_done(Connection& connection, const Notice& notice) {
  connection.inbound.erase(notice.key);
  auto registration = registrations_->find(notice.key);
  if (!registration) {
    reply(connection, NoticeType::Result, notice.seq, ErrorCode::Cancelled,
          "the operation ended on the owner's side before the transfer completed");
    return;
  }
  // The Result is posted before the owner wakes: an owner that exits at once must not take
  // the answer down with it.
  bool answered = false;
  try {
    registration->complete_from_remote(notice.token, [&] {
      answered = true;
      // The transfer may have begun on several rails: it ends on all of them.
      for (const auto& [id, other] : engine_.connections()) other->inbound.erase(notice.key);
      reply(connection, NoticeType::Result, notice.seq);
    });
  } catch (const Error& error) {
    if (!answered) reply(connection, NoticeType::Result, notice.seq, error.code(), error.what());
  }
}

void VerbsPassiveSide::on_abort(Connection& connection, const Notice& notice) {
  // Only the connection that began the operation may fail it.
  auto found = connection.inbound.find(notice.key);
  if (found == connection.inbound.end()) return;
  auto registration = found->second.lock();
  connection.inbound.erase(found);
  if (!registration) return;
  try {
    registration->fail_from_remote(notice.token, Error(notice.error.value_or(ErrorCode::Protocol),
                                                       "the active side failed: " + notice.text));
  } catch (const Error&) {
    // A wrong token changes nothing.
  }
}

void VerbsPassiveSide::on_connection_lost(
    const std::map<Id128, std::weak_ptr<Registration>>& inbound, const Error& error) {
  const auto& connections = engine_.connections();
  for (const auto& [registration_key, weak] : inbound) {
    const auto& key = registration_key;  // a plain reference: lambdas cannot capture a binding
    const bool held = std::any_of(connections.begin(), connections.end(), [&](const auto& entry) {
      return entry.second->state != Connection::State::Closed &&
             entry.second->inbound.contains(key);
    });
    if (held) continue;
    if (auto registration = weak.lock())
      registration->fail(Error(ErrorCode::PeerLost, error.code() == ErrorCode::PeerLost
                                                        ? std::string(error.message())
                                                        : std::string(error.what())));
  }
}

}  // namespace memwire::detail::verbs
