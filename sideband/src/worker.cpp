#include "memwire/sideband/worker.hpp"

#include <algorithm>
#include <utility>

#include "memwire/error.hpp"

namespace memwire::sideband {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Complete is the only success; a cancelled transfer is reported as an error.
void require_complete(OperationStatus status, Operation& operation, std::string_view what) {
  if (status == OperationStatus::Complete) return;
  throw Error(
      ErrorCode::Cancelled,
      std::string(what) + " was cancelled" +
          (operation.error_message().empty() ? std::string() : ": " + operation.error_message()));
}

}  // namespace

Lease::Lease(Channel& channel, std::string name, ReadableOperation operation)
    : channel_(&channel), name_(std::move(name)), operation_(std::move(operation)) {}

Lease::Lease(Lease&& other) noexcept
    : channel_(std::exchange(other.channel_, nullptr)),
      name_(std::move(other.name_)),
      operation_(std::move(other.operation_)) {
  other.operation_.reset();
}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    channel_ = std::exchange(other.channel_, nullptr);
    name_ = std::move(other.name_);
    operation_ = std::move(other.operation_);
    other.operation_.reset();
  }
  return *this;
}

Lease::~Lease() { release(); }

ReadableOperation& Lease::operation() {
  if (!operation_) throw Error(ErrorCode::InvalidArgument, "the lease was released");
  return *operation_;
}

OperationStatus Lease::wait(milliseconds timeout) {
  return operation().wait_for_completion(timeout);
}

void Lease::release() {
  if (channel_) {
    try {
      channel_->withdraw(name_);
    } catch (const std::exception&) {
      // The name expires by itself; a lease must end even when the channel is down.
    }
    channel_ = nullptr;
  }
  if (operation_) {
    try {
      if (!is_terminal(operation_->status())) operation_->cancel();
    } catch (const std::exception&) {
      // It ended meanwhile (errored): nothing left to revoke.
    }
    operation_.reset();
  }
}

Worker::Worker(Connector& connector, Channel& channel)
    : connector_(&connector), channel_(&channel) {}

// The name should not outlive the metadata behind it.
milliseconds Worker::publish_operation(std::string_view name, const ReadableOperation& operation,
                                       milliseconds ttl) {
  auto metadata = operation.metadata();
  if (metadata.expires_at_ms() != 0) {
    milliseconds remaining(std::max<std::int64_t>(1, metadata.expires_at_ms() - unix_now_ms()));
    ttl = ttl.count() > 0 ? std::min(ttl, remaining) : remaining;
  }
  channel_->publish(name, metadata, ttl);
  return ttl;
}

Lease Worker::publish(std::string_view name, std::vector<Descriptor> local, milliseconds ttl) {
  validate_name(name);
  auto operation = connector_->create_readable(std::move(local));
  publish_operation(name, operation, ttl);
  return Lease(*channel_, std::string(name), std::move(operation));
}

void Worker::republish(Lease& lease, std::vector<Descriptor> local, milliseconds ttl) {
  if (!lease.channel_) throw Error(ErrorCode::InvalidArgument, "republish: the lease was released");
  auto operation = connector_->create_readable(std::move(local));
  publish_operation(lease.name_, operation, ttl);
  // The old operation ends here (its remote access with it); the name points at the new one.
  lease.operation_.reset();
  lease.operation_.emplace(std::move(operation));
}

ReadOperation Worker::read(std::string_view name, std::vector<Descriptor> local,
                           milliseconds timeout, Lookup lookup) {
  auto deadline = Clock::now() + timeout;
  auto metadata =
      lookup == Lookup::Fetch ? channel_->fetch(name, timeout) : channel_->wait_for(name, timeout);
  auto operation = connector_->begin_read(metadata, std::move(local));
  // Destroying the operation on a throw (timeout) cancels it.
  require_complete(operation.wait_for_completion(left_until(deadline)), operation,
                   "reading '" + std::string(name) + "'");
  return operation;
}

std::unique_ptr<Subscription> Worker::serve(std::string_view prefix, ServeHandler handler,
                                            ServeOptions options) {
  if (!handler) throw Error(ErrorCode::InvalidArgument, "serve: no handler");
  auto* connector = connector_;
  return channel_->serve(prefix,
                         [connector, handler = std::move(handler), options = std::move(options)](
                             const std::string& name, const RdmaMetadata& writable) {
                           auto data = handler(name);
                           auto operation = connector->begin_write(data.descriptors, writable);
                           require_complete(operation.wait_for_completion(options.write_timeout),
                                            operation, "writing '" + name + "'");
                           if (options.on_written) options.on_written(name, operation);
                         });
}

WritableOperation Worker::request(std::string_view name, std::vector<Descriptor> local,
                                  milliseconds timeout) {
  validate_name(name);
  auto deadline = Clock::now() + timeout;
  auto operation = connector_->create_writable(std::move(local));
  channel_->request(name, operation.metadata(), timeout);
  // The owner replies once its write completed; our side completes on the notice that follows.
  require_complete(
      operation.wait_for_completion(std::max(left_until(deadline), milliseconds(1000))), operation,
      "request for '" + std::string(name) + "'");
  return operation;
}

}  // namespace memwire::sideband
