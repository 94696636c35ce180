#include "operation_core.hpp"

namespace memwire::detail {

OperationStatus OperationCore::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

std::string OperationCore::transport() const {
  std::lock_guard lock(mutex_);
  return transport_;
}

void OperationCore::set_transport(std::string name) {
  std::lock_guard lock(mutex_);
  transport_ = std::move(name);
}

std::string OperationCore::error_message() const {
  std::lock_guard lock(mutex_);
  return error_ ? error_->what() : std::string();
}

std::optional<Error> OperationCore::failure() const {
  std::lock_guard lock(mutex_);
  return error_;
}

OperationStatus OperationCore::wait(std::optional<std::chrono::milliseconds> timeout) const {
  std::unique_lock lock(mutex_);
  auto done = [&] { return is_terminal(status_) && !settling_; };
  if (!timeout) {
    finished_.wait(lock, done);
  } else if (!finished_.wait_for(lock, *timeout, done)) {
    throw Error(ErrorCode::Timeout, "operation not finished after " +
                                        std::to_string(timeout->count()) + " ms (status " +
                                        std::string(to_string(status_)) + ")");
  }
  if (status_ == OperationStatus::Errored) throw *error_;
  return status_;
}

void OperationCore::on_complete(Callback callback) {
  std::unique_lock lock(mutex_);
  if (!is_terminal(status_) || settling_) {
    callbacks_.push_back(std::move(callback));
    return;
  }
  auto status = status_;
  lock.unlock();
  callback(status);
}

bool OperationCore::finish(OperationStatus status, std::optional<Error> error,
                           const std::function<void()>& settle) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(status_)) return false;
    status_ = status;
    error_ = std::move(error);
    settling_ = static_cast<bool>(settle);
    if (!settling_) callbacks.swap(callbacks_);
  }
  if (settle) {
    settle();
    std::lock_guard lock(mutex_);
    settling_ = false;
    callbacks.swap(callbacks_);
  }
  finished_.notify_all();
  for (auto& callback : callbacks) callback(status);
  return true;
}

void OperationCore::mark_in_progress() {
  std::lock_guard lock(mutex_);
  if (!is_terminal(status_)) status_ = OperationStatus::InProgress;
}

bool OperationCore::cancel_applies() const {
  std::lock_guard lock(mutex_);
  if (status_ == OperationStatus::Errored)
    throw Error(ErrorCode::InvalidArgument,
                "cannot cancel an errored operation (" + std::string(error_->what()) + ")");
  return !is_terminal(status_);
}

}  // namespace memwire::detail
