#include "transport/tcp/tcp_passive_side.hpp"

#include "registration.hpp"

namespace memwire::detail {

std::shared_ptr<Registration> TcpPassiveSide::find(const Id128& key) const {
  auto registration = registrations_->find(key);
  if (!registration) throw Error(ErrorCode::NotFound, "no live operation with that notification key");
  return registration;
}

void TcpPassiveSide::answer(TcpConnection& connection, FrameType type, const FrameHeader& request,
                            const Error* error) {
  OutFrame frame;
  frame.header.type = type;
  frame.header.request_id = request.request_id;
  if (error != nullptr) {
    frame.header.code = wire_code(error->code());
    frame.text = std::string(error->what()).substr(0, FrameHeader::kMaxText);
  }
  connection.send(std::move(frame));
}

void TcpPassiveSide::touch(const std::shared_ptr<Registration>& registration) {
  // A pooled connection lives long: forget registrations that ended elsewhere.
  if (touched_.size() >= 256)
    std::erase_if(touched_, [](const auto& entry) {
      auto live = entry.second.lock();
      return !live || is_terminal(live->status());
    });
  if (touched_.try_emplace(registration->key(), registration).second) {
    registration->gate().add_breaker(reinterpret_cast<std::uintptr_t>(this),
                                     [weak = connection_] {
                                       if (auto connection = weak.lock())
                                         connection->shutdown("registration revoked");
                                     });
  }
}

void TcpPassiveSide::on_frame(TcpConnection& connection, const FrameHeader& header) {
  switch (header.type) {
    case FrameType::Hello:
      connection.receive_text(header.length);
      return;
    case FrameType::ReadRequest:
      return serve_read(connection, header);
    case FrameType::WriteRequest:
      return serve_write(connection, header);
    case FrameType::Notice:
      return serve_notice(connection, header);
    default:
      connection.shutdown("protocol error: unexpected frame for the passive side");
  }
}

void TcpPassiveSide::serve_read(TcpConnection& connection, const FrameHeader& header) {
  try {
    auto registration = find(header.key);
    // The check's pin is dropped at once: the writer pins again right before sending.
    registration->check_access(header.token, OperationKind::Read, header.index, header.offset,
                               header.length, "tcp");
    touch(registration);
    const auto& descriptor = registration->descriptors()[header.index];
    OutFrame frame;
    frame.header.type = FrameType::ReadResponse;
    frame.header.request_id = header.request_id;
    frame.header.length = header.length;
    frame.data = static_cast<const std::byte*>(descriptor.ptr()) + header.offset;
    frame.gate = &registration->gate();
    frame.keep_alive = registration;
    connection.send(std::move(frame));
  } catch (const Error& error) {
    answer(connection, FrameType::ReadResponse, header, &error);
  }
}

void TcpPassiveSide::serve_write(TcpConnection& connection, const FrameHeader& header) {
  std::shared_ptr<Registration> registration;
  try {
    registration = find(header.key);
    auto access = registration->check_access(header.token, OperationKind::Write, header.index,
                                             header.offset, header.length, "tcp");
    touch(registration);
    if (!connection.receive(access.data, header.length)) return;
  } catch (const Error& error) {
    if (connection.discard(header.length)) answer(connection, FrameType::WriteResponse, header, &error);
    return;
  }
  answer(connection, FrameType::WriteResponse, header, nullptr);
}

void TcpPassiveSide::serve_notice(TcpConnection& connection, const FrameHeader& header) {
  auto text = connection.receive_text(header.length);
  if (!text) return;
  try {
    auto registration = find(header.key);
    if (header.code == 0) {
      registration->complete_from_remote(header.token);
    } else {
      registration->fail_from_remote(
          header.token, Error(error_code_from_wire(header.code), "the active side reported: " + *text));
    }
    touched_.erase(header.key);
  } catch (const Error& error) {
    answer(connection, FrameType::NoticeResponse, header, &error);
    return;
  }
  answer(connection, FrameType::NoticeResponse, header, nullptr);
}

void TcpPassiveSide::on_closed(TcpConnection&, const Error& reason) {
  auto touched = std::move(touched_);
  for (auto& [key, weak] : touched)
    if (auto registration = weak.lock(); registration && !is_terminal(registration->status()))
      registration->fail(Error(ErrorCode::PeerLost, std::string("the active side is gone (") +
                                                         reason.what() + ")"));
}

}  // namespace memwire::detail
