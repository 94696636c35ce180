#pragma once

// The bodies that answers being sent keep alive, and their budget. A document's body is the
// store's own (MetadataStore::share): every reader of it shares it, so it counts once however
// many are sending it; one replaced while slow readers still take it counts apart, as does an
// answer made for one request (a long poll of a request server). One more that does not fit is
// answered 503 before a byte is sent. Without it, each GET copied its document: 96 slow readers
// of one 15 MiB document took the registry up by 708 to 1,444 MiB (issue 51).

#include <httplib.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "http/server/request_rules.hpp"

namespace memwire::sideband::http {

class SendingBodies {
 public:
  explicit SendingBodies(std::size_t max_bytes) : max_bytes_(max_bytes) {}
  SendingBodies(const SendingBodies&) = delete;
  SendingBodies& operator=(const SendingBodies&) = delete;

  std::size_t bytes() {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

  // Answers `res` with `body`, which is held (and counted) until the answer is sent or
  // dropped; throws HttpStatusError(503) when it would take the bodies held past the budget.
  void send(httplib::Response& res, std::shared_ptr<const std::string> body,
            const std::string& content_type) {
    auto held = hold(std::move(body));
    const auto* text = held.get();
    res.set_content_provider(
        text->size(), content_type,
        [held = std::move(held)](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
          return sink.write(held->data() + offset, length);
        });
  }

 private:
  // `body`, with a deleter that lets it go here once the last answer sending it does.
  std::shared_ptr<const std::string> hold(std::shared_ptr<const std::string> body) {
    const auto* key = body.get();
    {
      std::lock_guard lock(mutex_);
      auto& senders = senders_[key];
      if (senders == 0) {
        if (bytes_ + key->size() > max_bytes_) {
          senders_.erase(key);
          throw HttpStatusError(503, "answers being sent hold " + std::to_string(bytes_) +
                                         " bytes and this one needs " +
                                         std::to_string(key->size()) + " more (max_sending_bytes " +
                                         std::to_string(max_bytes_) + "); try again");
        }
        bytes_ += key->size();
      }
      ++senders;
    }
    // The deleter keeps `body` alive: its address is not reused while it is counted.
    return std::shared_ptr<const std::string>(key,
                                              [this, body = std::move(body)](const std::string*) {
                                                std::lock_guard lock(mutex_);
                                                auto found = senders_.find(body.get());
                                                if (--found->second > 0) return;
                                                bytes_ -= body->size();
                                                senders_.erase(found);
                                              });
  }

  const std::size_t max_bytes_;
  std::mutex mutex_;
  std::map<const std::string*, std::size_t> senders_;  // answers sending each body
  std::size_t bytes_ = 0;                              // of the bodies in senders_
};

}  // namespace memwire::sideband::http
