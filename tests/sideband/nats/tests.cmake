# NatsChannel tests against a real nats-server (memwire_test_support's NatsServer starts one per test
# with JetStream in a temporary folder). nats-server must be installed: the tests fail without it.
# The TLS tests make certificates with the openssl tool (they skip without it); the NKey test
# makes its key with libcrypto.
if(NOT MEMWIRE_HAVE_NATS)
  return()
endif()
find_package(OpenSSL REQUIRED)
set(nats_tests_sources
  nats_channel_test.cpp nats_security_test.cpp nats_entry_test.cpp nats_hostile_parts_test.cpp
  nats_authz_test.cpp nats_pool_test.cpp nats_server_start_test.cpp nkey_signer_test.cpp)
list(TRANSFORM nats_tests_sources PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
add_executable(memwire_nats_tests ${nats_tests_sources})
# nats_authz_test loads deploy/nats/roles.conf as it is into its server.
target_compile_definitions(memwire_nats_tests PRIVATE
  MEMWIRE_DEPLOY_NATS_DIR="${PROJECT_SOURCE_DIR}/deploy/nats")
# nats_entry_test and nkey_signer_test reach into the library's private parts (sideband/src/nats/).
target_link_libraries(memwire_nats_tests
  PRIVATE memwire-sideband-internal memwire_test_support PkgConfig::LIBNATS OpenSSL::Crypto
          GTest::gtest_main Threads::Threads)
gtest_discover_tests(memwire_nats_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)

# The support's NatsServer against a thread that takes loopback ports as fast as it can: alone,
# since it would take other tests' ports too.
add_executable(memwire_nats_port_tests ${CMAKE_CURRENT_LIST_DIR}/nats_server_port_test.cpp)
target_link_libraries(memwire_nats_port_tests
  PRIVATE memwire-sideband-internal memwire_test_support GTest::gtest_main Threads::Threads)
gtest_discover_tests(memwire_nats_port_tests DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE)

# The same against a real 3-node cluster (routes and JetStream on free loopback ports): nodes are
# killed and restarted, so these take seconds each; their own binary keeps them apart.
add_executable(memwire_nats_cluster_tests ${CMAKE_CURRENT_LIST_DIR}/nats_cluster_test.cpp)
target_link_libraries(memwire_nats_cluster_tests
  PRIVATE memwire-sideband-internal memwire_test_support PkgConfig::LIBNATS GTest::gtest_main
          Threads::Threads)
gtest_discover_tests(memwire_nats_cluster_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 180)
