#include "memwire/operation.hpp"

#include "core/active_transfer.hpp"
#include "core/registration.hpp"
#include "memwire/error.hpp"

namespace memwire {

Operation::Operation(std::shared_ptr<detail::OperationCore> core) : core_(std::move(core)) {}
Operation::Operation(Operation&&) noexcept = default;

Operation& Operation::operator=(Operation&& other) noexcept {
  if (this != &other) {
    if (core_) core_->abandon();
    core_ = std::move(other.core_);
  }
  return *this;
}

Operation::~Operation() {
  if (core_) core_->abandon();
}

const detail::OperationCore& Operation::core() const {
  if (!core_) throw Error(ErrorCode::InvalidArgument, "operation was moved from");
  return *core_;
}

OperationKind Operation::kind() const { return core().kind(); }
OperationStatus Operation::status() const { return core().status(); }
std::string Operation::transport() const { return core().transport(); }
std::string Operation::error_message() const { return core().error_message(); }

OperationStatus Operation::wait_for_completion(std::chrono::milliseconds timeout) {
  return core().wait(timeout);
}

void Operation::cancel(std::string_view reason) {
  core();
  core_->cancel(std::string(reason));
}

void Operation::on_complete(Callback callback) {
  core();
  core_->on_complete(std::move(callback));
}

RdmaMetadata ReadableOperation::metadata() const {
  return static_cast<const detail::Registration&>(core()).metadata();
}

RdmaMetadata WritableOperation::metadata() const {
  return static_cast<const detail::Registration&>(core()).metadata();
}

RdmaMetadata ReadableOperation::renew(std::chrono::milliseconds lifetime) {
  core();
  return static_cast<detail::Registration&>(*core_).renew(lifetime);
}

RdmaMetadata WritableOperation::renew(std::chrono::milliseconds lifetime) {
  core();
  return static_cast<detail::Registration&>(*core_).renew(lifetime);
}

const std::vector<Descriptor>& ReadOperation::results() const {
  const auto& transfer = static_cast<const detail::ActiveTransfer&>(core());
  if (transfer.status() != OperationStatus::Complete)
    throw Error(ErrorCode::InvalidArgument, "results() before the read completed (status " +
                                                std::string(to_string(transfer.status())) + ")");
  return transfer.results();
}

}  // namespace memwire
