# The verbs transport on a real RDMA device (Soft-RoCE in integration/rxe; skips without one).
# Its own binary: the guest runs it alone, and its revocation tests use raw verbs. Built only
# with the verbs transport (MEMWIRE_WITH_VERBS).
if(TARGET memwire-transport-verbs)
  add_executable(memwire_verbs_tests sdk/transport/verbs/verbs_transport_test.cpp
    sdk/transport/verbs/verbs_rails_test.cpp sdk/transport/verbs/verbs_access_test.cpp
    sdk/transport/verbs/verbs_wire_test.cpp sdk/transport/verbs/verbs_passive_side_test.cpp
    sdk/transport/verbs/verbs_active_side_test.cpp sdk/transport/verbs/verbs_grant_lifecycle_test.cpp
    sdk/transport/verbs/request_grant_nic_test.cpp
    # The verbs folder reads its own settings (read_verbs_environment): tested wherever verbs
    # is built, on the host too (no device needed), as are its progress loop's rules and its
    # runs of descriptors.
    sdk/transport/verbs/rdma_access_options_test.cpp sdk/transport/verbs/progress_loop_test.cpp
    sdk/transport/verbs/descriptor_runs_test.cpp)
  target_link_libraries(memwire_verbs_tests PRIVATE memwire-internal memwire_test_support
    GTest::gtest_main PkgConfig::IBVERBS PkgConfig::RDMACM nlohmann_json::nlohmann_json)
  memwire_test_programs(memwire_verbs_tests peer_program=memwire_test_peer)
  gtest_discover_tests(memwire_verbs_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endif()
