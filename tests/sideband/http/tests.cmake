# HTTP sideband tests: the endpoint and channel against real sockets, the Worker with real
# connectors, and separate processes (memwire-registry, the memwire CLI, the graph workers; the
# last also over a real nats-server).
if(NOT MEMWIRE_HAVE_HTTP)
  return()
endif()
# One binary for the HTTP channel and what runs on it: the name rules (../name_test.cpp) and the
# workers (../worker/tests.cmake adds them).
set(sideband_tests_sources
  ../name_test.cpp http_endpoint_test.cpp http_channel_test.cpp http_process_test.cpp
  http_authz_test.cpp http_pool_test.cpp http_quota_test.cpp registry_full_disk_test.cpp
  telemetry_test.cpp http_slow_readers_test.cpp)
list(TRANSFORM sideband_tests_sources PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
add_executable(memwire_sideband_tests ${sideband_tests_sources})
target_link_libraries(memwire_sideband_tests
  PRIVATE memwire-sideband-internal memwire_test_support PkgConfig::CPP_HTTPLIB
          nlohmann_json::nlohmann_json GTest::gtest_main Threads::Threads)
# The services as processes; worker/worker_test kills a writing owner (tests/support/test_peer.cpp)
# in the middle of a request.
memwire_test_programs(memwire_sideband_tests registry_program=memwire-registry
  cli_program=memwire-cli producer_program=memwire-producer consumer_program=memwire-consumer
  peer_program=memwire_test_peer)
gtest_discover_tests(memwire_sideband_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
# Hostile-input tests reach two internals (the metrics text and the state file) directly; the
# endpoint's store and request broker have unit tests of their own.
target_sources(memwire_sideband_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/http_hardening_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metadata_store_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/request_broker_test.cpp)
