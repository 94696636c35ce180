// The verbs access settings (issue 20) read at the program's edge: ConnectorOptions'
// from_environment() has the verbs folder (read_verbs_environment) take MEMWIRE_RDMA_ACCESS,
// MEMWIRE_RDMA_MAX_ACCESS_FAULTS and MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS, and refuse what is
// not a number. A build without verbs reads none of them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "memwire/connector.hpp"
#include "memwire/error.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

TEST(RdmaAccessOptions, ComeFromTheEnvironment) {
  const ConnectorOptions defaults;
  EXPECT_EQ(defaults.rdma.access, "auto");
  EXPECT_EQ(defaults.rdma.max_access_faults, 8u);
  EXPECT_EQ(defaults.rdma.access_fault_window, 60s);
  ::setenv("MEMWIRE_RDMA_ACCESS", "connection_pd", 1);
  ::setenv("MEMWIRE_RDMA_MAX_ACCESS_FAULTS", "3", 1);
  ::setenv("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS", "1500", 1);
  const auto options = ConnectorOptions::from_environment();
  EXPECT_EQ(options.rdma.access, "connection_pd");
  EXPECT_EQ(options.rdma.max_access_faults, 3u);
  EXPECT_EQ(options.rdma.access_fault_window, 1500ms);
  ::setenv("MEMWIRE_RDMA_MAX_ACCESS_FAULTS", "many", 1);
  EXPECT_THROW(ConnectorOptions::from_environment(), Error);
  ::unsetenv("MEMWIRE_RDMA_ACCESS");
  ::unsetenv("MEMWIRE_RDMA_MAX_ACCESS_FAULTS");
  ::unsetenv("MEMWIRE_RDMA_ACCESS_FAULT_WINDOW_MS");
}

}  // namespace
