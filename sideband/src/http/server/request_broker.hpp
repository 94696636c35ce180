#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace memwire::sideband::http {

// Request/reply over plain HTTP, held by the endpoint:
//  - an owner registers a server for a prefix (POST /v1/servers) and long-polls for requests
//    (GET /v1/servers/{id}/requests); each poll hands out at most one request;
//  - a requester posts its writable metadata for a name (POST /v1/requests/{name}) and its call
//    stays open until the owner replies (POST /v1/requests/{id}/reply) or the wait ends;
//  - a name is served by prefix P when P is empty, equals the name, or the name starts with
//    "P." ; the longest such live prefix wins;
//  - a server that has not polled for kServerLease is dead; its queued requests fail as
//    "not found" when no other server takes the prefix;
//  - a server has an owner (an opaque name the endpoint gives: which grant registered it), and
//    so has each request a server took: the endpoint lets only that owner poll the server,
//    remove it or answer the request, so knowing an id is not enough.
class RequestBroker {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kServerLease{10};

  struct Request {
    std::string id;
    std::string name;
    std::string document;  // the requester's writable metadata
  };
  struct Result {
    bool done = false;
    std::string code;  // memwire::to_string(ErrorCode) when !done
    std::string message;
  };

  std::string add_server(std::string prefix, std::string owner = {});
  // Who registered `server_id`; nullopt when it is unknown.
  std::optional<std::string> server_owner(const std::string& server_id);
  // The owner of the server that took `request_id`; nullopt when no server took it (queued,
  // answered, timed out, or never was).
  std::optional<std::string> request_owner(const std::string& request_id);
  bool remove_server(const std::string& server_id);
  // Waits for one request for `server_id`; an empty vector when the wait ended first, nullopt
  // when the server is unknown (never registered, removed, or the endpoint restarted).
  std::optional<std::vector<Request>> poll(const std::string& server_id,
                                           Clock::time_point deadline);
  // Queues a request and waits for its reply. Codes: "not found" when nobody serves the name,
  // "timeout" when the deadline passes first.
  Result submit(const std::string& name, std::string document, Clock::time_point deadline);
  // False when the request is unknown (it timed out, or never was) or no server took it yet.
  bool reply(const std::string& request_id, Result result);

  void sweep();  // reaps dead servers
  void stop();   // releases every waiter
  std::size_t servers();
  std::size_t pending();

 private:
  struct Server {
    std::string prefix;
    std::string owner;
    Clock::time_point last_seen;
    int polling = 0;
  };
  enum class State { Queued, Taken, Done };
  struct Pending {
    std::string name;
    std::string document;
    std::string prefix;
    State state = State::Queued;
    Result result;
    std::string taken_by;  // the owner of the server that took it
  };

  bool live(const Server& server, Clock::time_point now) const;
  std::optional<std::string> prefix_for(const std::string& name, Clock::time_point now) const;
  void fail_orphans_locked(Clock::time_point now);
  std::string new_id();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Server> servers_;
  std::map<std::string, std::deque<std::string>> queues_;  // prefix -> queued request ids
  std::map<std::string, Pending> pending_;
  std::mt19937_64 random_{std::random_device{}()};
  bool stopping_ = false;
};

}  // namespace memwire::sideband::http
