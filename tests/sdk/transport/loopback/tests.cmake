# The loopback transport (sdk/src/transport/loopback/), in builds that have it: the registry
# lists it, telemetry counts it, and the conformance suite (memwire_conformance_tests, which
# asks the registry) runs its one-shot cases over it with no line of its own.
if(TARGET memwire-transport-loopback)
  add_executable(memwire_loopback_tests sdk/transport/loopback/loopback_transport_test.cpp)
  target_link_libraries(memwire_loopback_tests PRIVATE memwire-internal memwire_test_support
    GTest::gtest_main)
  gtest_discover_tests(memwire_loopback_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
endif()
