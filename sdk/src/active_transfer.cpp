#include "active_transfer.hpp"

namespace memwire::detail {

ActiveTransfer::ActiveTransfer(OperationKind kind, std::vector<Descriptor> local,
                               RdmaMetadata remote, std::chrono::milliseconds grace)
    : OperationCore(kind, OperationStatus::InProgress),
      local_(std::move(local)),
      remote_(std::move(remote)),
      key_(*parse_id(remote_.notification_key())),
      token_(*parse_id(remote_.token())),
      grace_(grace) {}

ActiveTransfer::~ActiveTransfer() { gate_.close(grace_); }

void ActiveTransfer::set_failure_notifier(std::function<void(const Error&)> notifier) {
  std::lock_guard lock(notifier_mutex_);
  notify_failure_ = std::move(notifier);
}

void ActiveTransfer::succeed() { finish(OperationStatus::Complete); }

void ActiveTransfer::fail(Error error) { stop(OperationStatus::Errored, std::move(error)); }

void ActiveTransfer::stop(OperationStatus status, Error error) {
  // Transports see the final status at once and stop; the caller hears of the end only once
  // the gate is closed, so that no other connection of this transfer is still copying into
  // its buffer (one connection's loss used to be reported while another went on writing the
  // bytes it had already received).
  if (!finish(status, error, [this] { gate_.close(grace_); })) return;
  std::function<void(const Error&)> notify;
  {
    std::lock_guard lock(notifier_mutex_);
    notify.swap(notify_failure_);
  }
  if (notify) notify(error);
}

void ActiveTransfer::cancel() {
  if (!cancel_applies()) return;
  stop(OperationStatus::Cancelled, Error(ErrorCode::Cancelled, "cancelled by the active side"));
}

void ActiveTransfer::abandon() {
  stop(OperationStatus::Cancelled, Error(ErrorCode::Cancelled, "dropped by the active side"));
}

}  // namespace memwire::detail
