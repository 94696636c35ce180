#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "registration_table.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace memwire::detail {

class Registration;

// Serves one accepted connection: checks every request against the live registration before
// touching memory, answers errors as frames, and fails the registrations it touched when the
// active side's connection dies.
class TcpPassiveSide final : public FrameHandler {
 public:
  explicit TcpPassiveSide(std::shared_ptr<RegistrationTable> registrations)
      : registrations_(std::move(registrations)) {}

  // The connection this handler serves, for the breakers it installs on registrations.
  void bind(std::weak_ptr<TcpConnection> connection) { connection_ = std::move(connection); }

  void on_frame(TcpConnection& connection, const FrameHeader& header) override;
  void on_closed(TcpConnection& connection, const Error& reason) override;

 private:
  std::shared_ptr<Registration> find(const Id128& key) const;
  void serve_read(TcpConnection& connection, const FrameHeader& header);
  void serve_write(TcpConnection& connection, const FrameHeader& header);
  void serve_notice(TcpConnection& connection, const FrameHeader& header);
  void touch(const std::shared_ptr<Registration>& registration);
  static void answer(TcpConnection& connection, FrameType type, const FrameHeader& request,
                     const Error* error);

  const std::shared_ptr<RegistrationTable> registrations_;
  std::weak_ptr<TcpConnection> connection_;
  // Registrations this connection accessed and that have not completed yet.
  std::map<Id128, std::weak_ptr<Registration>> touched_;
};

}  // namespace memwire::detail
