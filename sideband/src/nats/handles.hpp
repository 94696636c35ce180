#pragma once

// RAII for nats.c handles: every object nats.c hands out is owned by exactly one of these.

#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace memwire::sideband::nats_detail {

template <auto Destroy>
struct Deleter {
  template <class T>
  void operator()(T* handle) const noexcept {
    if (handle != nullptr) Destroy(handle);
  }
};

using OptionsPtr = std::unique_ptr<natsOptions, Deleter<natsOptions_Destroy>>;
using ConnectionPtr = std::unique_ptr<natsConnection, Deleter<natsConnection_Destroy>>;
using SubscriptionPtr = std::unique_ptr<natsSubscription, Deleter<natsSubscription_Destroy>>;
using MsgPtr = std::unique_ptr<natsMsg, Deleter<natsMsg_Destroy>>;
using JsPtr = std::unique_ptr<jsCtx, Deleter<jsCtx_Destroy>>;
using KvPtr = std::unique_ptr<kvStore, Deleter<kvStore_Destroy>>;
using WatcherPtr = std::unique_ptr<kvWatcher, Deleter<kvWatcher_Destroy>>;
using EntryPtr = std::unique_ptr<kvEntry, Deleter<kvEntry_Destroy>>;
using InboxPtr = std::unique_ptr<natsInbox, Deleter<natsInbox_Destroy>>;

// nats.c takes int64 milliseconds; never hand it zero or a negative wait.
inline std::int64_t to_millis(std::chrono::milliseconds duration) {
  return duration.count() < 1 ? 1 : static_cast<std::int64_t>(duration.count());
}

// "Status text (detail)", the detail being nats.c's last error of this thread when it has one.
std::string describe(natsStatus status);

// Throws memwire::Error for a failed nats.c call: NATS_TIMEOUT -> Timeout, refused credentials
// -> AccessDenied, anything else -> Transport. `what` says what was attempted.
[[noreturn]] void fail(natsStatus status, const std::string& what);

}  // namespace memwire::sideband::nats_detail
