#pragma once
// A VerbsPort for tests of the verbs protocol's sides without an RDMA device.

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/verbs/verbs_port.hpp"

namespace memwire::test_support {

using detail::verbs::AccessGrant;
using detail::verbs::Connection;
using detail::verbs::Notice;
using detail::verbs::Rail;

// A port that records what the side sends and fails; it has no rail and opens no connection.
class RecordingPort final : public detail::verbs::VerbsPort {
 public:
  std::size_t rail_count() const noexcept override { return 1; }
  Rail& rail(std::size_t) const noexcept override {
    ADD_FAILURE() << "the side asked for a rail: it was about to grant keys";
    std::abort();
  }
  const std::map<rdma_cm_id*, std::shared_ptr<Connection>>& connections() const noexcept override {
    return connections_;
  }
  std::shared_ptr<Connection> connect(const std::string&, const std::string&,
                                      std::size_t) override {
    throw Error(ErrorCode::Transport, "this port opens no connection");
  }
  void send(Connection&, const Notice& notice) override { sent.push_back(notice); }
  void fail_connection(Connection&, const Error& error, std::optional<std::uint64_t>,
                       std::optional<Error>) override {
    failures.push_back(error);
  }
  std::function<void()> later(std::function<void()> work) override { return work; }
  void watch_expiry(const std::shared_ptr<detail::Registration>&,
                    const std::shared_ptr<AccessGrant>&) override {}
  void close_if_bind_stalls(const std::shared_ptr<Connection>&, const std::shared_ptr<AccessGrant>&,
                            std::chrono::steady_clock::time_point) override {}
  const std::shared_ptr<detail::verbs::KeyBudget>& key_budget() const noexcept override {
    return budget_;
  }

  std::vector<Notice> sent;
  std::vector<Error> failures;

 private:
  std::map<rdma_cm_id*, std::shared_ptr<Connection>> connections_;
  std::shared_ptr<detail::verbs::KeyBudget> budget_;
};

}  // namespace memwire::test_support
