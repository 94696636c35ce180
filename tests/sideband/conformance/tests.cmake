# The Channel conformance suite: the same cases over every channel this build has, each against
# a real server (an HttpEndpoint on a loopback port, a nats-server started per test).
if(NOT MEMWIRE_HAVE_HTTP AND NOT MEMWIRE_HAVE_NATS)
  return()
endif()
add_executable(memwire_channel_conformance_tests
  ${CMAKE_CURRENT_LIST_DIR}/channel_world.cpp
  ${CMAKE_CURRENT_LIST_DIR}/registry_conformance_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/request_conformance_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pool_conformance_test.cpp)
target_link_libraries(memwire_channel_conformance_tests
  PRIVATE memwire-sideband-internal memwire_test_support GTest::gtest_main Threads::Threads)
if(MEMWIRE_HAVE_HTTP)  # the HTTP world's stand-in server for stored garbage
  target_link_libraries(memwire_channel_conformance_tests PRIVATE PkgConfig::CPP_HTTPLIB)
endif()
if(MEMWIRE_HAVE_NATS)  # the NATS world plants stored documents with nats.c
  target_link_libraries(memwire_channel_conformance_tests PRIVATE PkgConfig::LIBNATS)
endif()
gtest_discover_tests(memwire_channel_conformance_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
