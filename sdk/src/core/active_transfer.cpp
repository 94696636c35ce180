#include "core/active_transfer.hpp"

#include "cuda/cuda_staging.hpp"

namespace memwire::detail {
namespace {

// Metadata built in code skipped the parser's checks: an id that is not one is refused here.
Id128 id_from(const std::string& text, const char* field) {
  auto id = parse_id(text);
  if (!id)
    throw Error(ErrorCode::InvalidMetadata,
                std::string("metadata ") + field + " must be 32 lower-case hex digits");
  return *id;
}

// A pool's regions as spans: from the first block to the end of the last.
std::vector<RemoteDescriptor> spans_of(const PoolMetadata& pool) {
  std::vector<RemoteDescriptor> spans;
  spans.reserve(pool.regions().size());
  for (const auto& region : pool.regions())
    spans.push_back(
        {region.device, region.base, (region.count - 1) * region.stride + region.block_size});
  return spans;
}

// A one-shot operation's request: descriptor i to remote descriptor i, whole.
TransferRequest one_shot_request(const std::vector<Descriptor>& local) {
  TransferRequest request;
  request.segments.reserve(local.size());
  for (std::uint32_t i = 0; i < local.size(); ++i) {
    request.segments.push_back({static_cast<std::byte*>(local[i].ptr()), i, 0, local[i].size(), 0});
    request.bytes += local[i].size();
  }
  return request;
}

}  // namespace

std::uint64_t RemoteTarget::total_size() const noexcept {
  std::uint64_t total = 0;
  for (const auto& span : spans) total += span.size;
  return total;
}

ActiveTransfer::ActiveTransfer(OperationKind kind, std::vector<Descriptor> local,
                               const RdmaMetadata& remote, std::chrono::milliseconds grace)
    : OperationCore(kind, OperationStatus::InProgress),
      local_(std::move(local)),
      remote_{remote.descriptors(), remote.endpoint().connector, remote.expires_at_ms()},
      key_(id_from(remote.notification_key(), "notification_key")),
      token_(id_from(remote.token(), "token")),
      grace_(grace),
      request_(one_shot_request(local_)) {}

ActiveTransfer::ActiveTransfer(OperationKind kind, std::vector<Descriptor> local,
                               const PoolMetadata& remote, std::chrono::milliseconds grace)
    : OperationCore(kind, OperationStatus::InProgress),
      local_(std::move(local)),
      remote_{spans_of(remote), remote.endpoint().connector, 0},
      key_(id_from(remote.key(), "key")),
      token_(id_from(remote.token(), "token")),
      grace_(grace) {}

ActiveTransfer::~ActiveTransfer() { gate_.close(grace_); }

void ActiveTransfer::set_failure_notifier(std::function<void(const Error&)> notifier) {
  std::lock_guard lock(notifier_mutex_);
  notify_failure_ = std::move(notifier);
}

const std::vector<Descriptor>& ActiveTransfer::results() const noexcept {
  return staging_ ? staging_->device() : local_;
}

void ActiveTransfer::stage_through(std::shared_ptr<const CudaStaging> staging) {
  local_ = staging->host();
  // The segments move the stand-ins (one to one with local()).
  for (std::size_t i = 0; i < request_.segments.size() && i < local_.size(); ++i)
    request_.segments[i].local = static_cast<std::byte*>(local_[i].ptr());
  staging_ = std::move(staging);
}

bool ActiveTransfer::lands_on_device() const noexcept {
  return staging_ && kind() == OperationKind::Read;
}

void ActiveTransfer::landed(const void* host, std::size_t length) const noexcept {
  if (lands_on_device() && !is_terminal(status())) staging_->landed(host, length);
}

void ActiveTransfer::succeed() {
  // A read's bytes reach the device before its caller hears it completed.
  if (staging_ && kind() == OperationKind::Read && !is_terminal(status())) {
    try {
      staging_->copy_to_device();
    } catch (const Error& error) {
      fail(error);
      return;
    }
  }
  finish(OperationStatus::Complete);
}

void ActiveTransfer::fail(Error error) {
  // Mostly called on a transport thread, which may itself hold pins (requests still out on its
  // connection) that it lets go of only after this returns: refuse new pins, wait for none.
  // Cancelling or dropping the operation waits for the last pin. Refused before the failure is
  // visible, so no connection starts copying into a buffer whose transfer a waiter saw fail.
  if (is_terminal(status())) return;
  if (staging_) staging_->settle();  // no copy queued to the device lands after the failure
  gate_.refuse();
  if (!finish(OperationStatus::Errored, error)) return;
  notify_passive_side(error);
}

void ActiveTransfer::stop(OperationStatus status, Error error) {
  // Transports see the final status at once and stop; the caller hears of the end only once
  // the gate is closed, so that no other connection of this transfer is still copying into
  // its buffer. Also after a transport failed it: the caller may free its buffers then.
  const bool first = finish(status, error, [this] { gate_.close(grace_); });
  if (!first) gate_.close(grace_);
  if (first) notify_passive_side(error);
}

void ActiveTransfer::notify_passive_side(const Error& error) {
  std::function<void(const Error&)> notify;
  {
    std::lock_guard lock(notifier_mutex_);
    notify.swap(notify_failure_);
  }
  if (notify) notify(error);
}

void ActiveTransfer::cancel(std::string reason) {
  if (!cancel_applies()) return;
  stop(OperationStatus::Cancelled,
       Error(ErrorCode::Cancelled, reason.empty() ? "cancelled by the active side" : reason));
}

void ActiveTransfer::abandon() {
  // Ended already (the usual drop): only the wait for the last pin is left to do.
  if (is_terminal(status())) return gate_.close(grace_);
  stop(OperationStatus::Cancelled, Error(ErrorCode::Cancelled, "dropped by the active side"));
}

}  // namespace memwire::detail
