#include "request_service.hpp"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "channel_rules.hpp"
#include "memwire/error_codes.hpp"

namespace memwire::sideband::nats_detail {
namespace {

constexpr const char* kQueueGroup = "memwire";

std::string error_reply(std::string_view code, const std::string& message) {
  nlohmann::json reply = {{"ok", false}, {"code", code}, {"error", message}};
  return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A serve() registration: one synchronous subscription per subject, each drained by its own
// thread, so that a slow handler holds up neither metadata responders nor other prefixes.
class ServeSubscription final : public Subscription {
 public:
  struct Worker {
    std::shared_ptr<void> keep_alive;  // the channel's state: the connection stays open
    natsConnection* connection = nullptr;
    std::function<std::string(natsMsg*)> answer;  // never throws
    SubscriptionPtr subscription;
  };

  void add(std::shared_ptr<Worker> worker) {
    workers_.push_back(worker);
    threads_.emplace_back([worker] { run(*worker); });
  }

  ~ServeSubscription() override {
    // Unsubscribing wakes each thread out of NextMsg; a handler in progress finishes first.
    for (auto& worker : workers_) natsSubscription_Unsubscribe(worker->subscription.get());
    // Once we return, the server must no longer route requests here (they would time out
    // instead of failing with "no responders"): a round trip proves it processed the UNSUBs.
    if (!workers_.empty()) natsConnection_FlushTimeout(workers_.front()->connection, 2000);
    for (auto& thread : threads_) {
      if (thread.get_id() == std::this_thread::get_id()) {
        thread.detach();  // destroyed from its own handler: the worker owns what it uses
      } else {
        thread.join();
      }
    }
  }

 private:
  static void run(Worker& worker) {
    for (;;) {
      natsMsg* raw = nullptr;
      // A day stands for "forever"; the wait ends early on a message or an unsubscribe.
      auto status = natsSubscription_NextMsg(&raw, worker.subscription.get(), 86'400'000);
      MsgPtr message(raw);
      if (status == NATS_TIMEOUT || status == NATS_SLOW_CONSUMER) continue;
      if (status != NATS_OK) return;  // unsubscribed or connection closed
      const std::string reply = worker.answer(raw);
      if (const char* to = natsMsg_GetReply(raw)) {
        natsConnection_Publish(worker.connection, to, reply.data(), static_cast<int>(reply.size()));
      }
    }
  }

  std::vector<std::shared_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

Error abandoned(std::string_view name) {
  return Error(ErrorCode::Cancelled, "nats: the request for " + in_quotes(name) +
                                         " was abandoned before the owner answered");
}

void check_reply(std::string_view text, std::string_view name) {
  auto reply = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  auto protocol = [&](const char* why) {
    throw Error(ErrorCode::Protocol,
                "nats: the owner of " + in_quotes(name) + " sent a malformed reply (" + why + ")");
  };
  if (reply.is_discarded() || !reply.is_object()) protocol("not a JSON object");
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) protocol("no boolean 'ok'");
  if (ok->get<bool>()) return;
  auto code = reply.find("code");
  auto message = reply.find("error");
  std::string code_text =
      code != reply.end() && code->is_string() ? code->get<std::string>() : "transport";
  std::string message_text = message != reply.end() && message->is_string()
                                 ? message->get<std::string>()
                                 : std::string("no reason given");
  throw Error(error_code_from_name(code_text),
              "the owner of " + in_quotes(name) + " failed: " + message_text);
}

}  // namespace

NatsRequestService::NatsRequestService(std::shared_ptr<Store> store)
    : store_(std::move(store)),
      connection_(*store_->connection()),
      service_subject_(connection_.options().subject_prefix + ".get.") {}

void NatsRequestService::request(std::string_view name, const RdmaMetadata& writable,
                                 std::chrono::milliseconds timeout, std::stop_token abandon) {
  channel_rules::check_request(name, writable);
  const channel_rules::Deadline deadline(timeout);
  const auto [payload, part_key] =
      store_->envelope(writable.to_json(), 0, request_key(name), deadline);
  struct PartsCleanup {
    Store& store;
    const std::string& key;
    ~PartsCleanup() {
      if (!key.empty()) store.delete_parts(key);
    }
  } cleanup{*store_, part_key};

  // Not natsConnection_Request: it cannot be abandoned. The reply comes to an inbox of our
  // own; the wait ends on the reply, the deadline or `abandon`, whichever comes first.
  const std::string subject = service_subject_ + std::string(name);
  const std::string what = "nats: requesting " + in_quotes(name);
  if (abandon.stop_requested()) throw abandoned(name);
  const std::string inbox = connection_.new_inbox();
  auto waiter = std::make_shared<Waiter>();
  auto subscription = subscribe_waiter(connection_.get(), inbox, waiter, what);
  // One answer is all a request takes: a responder that keeps sending cannot grow the queue.
  auto status = natsSubscription_AutoUnsubscribe(subscription.get(), 1);
  if (status != NATS_OK) fail(status, what);
  // The server handles our SUB before the PUB that follows it: no reply can slip past.
  status = natsConnection_PublishRequest(connection_.get(), subject.c_str(), inbox.c_str(),
                                         payload.data(), static_cast<int>(payload.size()));
  if (status != NATS_OK) fail(status, what);

  // Taking the mutex before notifying: a stop between the predicate and the wait is not lost.
  std::stop_callback wake(abandon, [waiter] {
    std::lock_guard lock(waiter->mutex);
    waiter->changed.notify_all();
  });
  std::unique_lock lock(waiter->mutex);
  if (!waiter->changed.wait_until(lock, deadline.at(), [&] {
        return !waiter->updates.empty() || abandon.stop_requested();
      })) {
    throw Error(ErrorCode::Timeout, "nats: the owner of " + in_quotes(name) +
                                        " did not answer within " +
                                        std::to_string(timeout.count()) + " ms");
  }
  if (waiter->updates.empty()) throw abandoned(name);
  MsgPtr reply = std::move(waiter->updates.front());
  lock.unlock();
  // With headers (nats-server 2.2+), the server itself answers when nobody listens.
  if (natsMsg_IsNoResponders(reply.get())) {
    throw Error(ErrorCode::NotFound, "nats: nobody serves " + in_quotes(name));
  }
  check_reply(std::string_view(natsMsg_GetData(reply.get()),
                               static_cast<std::size_t>(natsMsg_GetDataLength(reply.get()))),
              name);
}

std::unique_ptr<Subscription> NatsRequestService::serve(std::string_view prefix,
                                                        RequestHandler handler) {
  if (!handler) throw Error(ErrorCode::InvalidArgument, "nats: serve() needs a handler");
  channel_rules::check_prefix(prefix);
  std::vector<std::string> subjects;
  if (prefix.empty()) {
    subjects.push_back(service_subject_ + ">");
  } else {
    subjects.push_back(service_subject_ + std::string(prefix));
    subjects.push_back(service_subject_ + std::string(prefix) + ".>");
  }
  auto subscription = std::make_unique<ServeSubscription>();
  for (const auto& subject : subjects) {
    natsSubscription* raw = nullptr;
    auto status =
        natsConnection_QueueSubscribeSync(&raw, connection_.get(), subject.c_str(), kQueueGroup);
    if (status != NATS_OK) fail(status, "nats: subscribing " + subject);
    auto worker = std::make_shared<ServeSubscription::Worker>();
    worker->subscription.reset(raw);
    worker->keep_alive = shared_from_this();
    worker->connection = connection_.get();
    worker->answer = [self = this, handler](natsMsg* message) {
      return self->answer(message, handler);
    };
    subscription->add(std::move(worker));
  }
  // Requests sent after serve() returns must find the subscriptions in place.
  connection_.flush(connection_.options().request_timeout);
  return subscription;
}

// Answers one request of a serve() subscription; never throws.
std::string NatsRequestService::answer(natsMsg* message, const RequestHandler& handler) {
  std::string name;
  try {
    std::string_view subject = natsMsg_GetSubject(message);
    subject.remove_prefix(std::min(subject.size(), service_subject_.size()));
    name = subject;
    auto entry =
        decode_entry(std::string_view(natsMsg_GetData(message),
                                      static_cast<std::size_t>(natsMsg_GetDataLength(message))),
                     name);
    // A requester's pieces are read within request_timeout, however many it claims.
    auto writable = channel_rules::metadata_under(
        name, store_->document_of(entry, request_key(name), name, /*may_retry=*/false,
                                  channel_rules::Deadline(connection_.options().request_timeout)));
    if (writable.operation_kind() != OperationKind::Write) {
      throw Error(ErrorCode::Pairing, "the request for " + in_quotes(name) +
                                          " carries metadata of a readable operation");
    }
    handler(name, writable);
    return R"({"ok":true})";
  } catch (const Error& error) {
    return error_reply(error_code_name(error.code()), std::string(error.message()));
  } catch (const std::exception& error) {
    return error_reply(error_code_name(ErrorCode::Transport),
                       std::string("serving ") + in_quotes(name) + ": " + error.what());
  } catch (...) {
    return error_reply(error_code_name(ErrorCode::Transport),
                       "serving " + in_quotes(name) + ": unknown failure");
  }
}

}  // namespace memwire::sideband::nats_detail
