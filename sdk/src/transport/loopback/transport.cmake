# loopback: copies between connectors of one process, for tests. It shows that a transport is
# its folder: this file, its source and its tests (tests/sdk/transport/loopback/) are all that
# adding it took; the registry, telemetry and the conformance suite find it from here. Built
# only into builds with tests (MEMWIRE_TEST_TRANSPORT_LOOPBACK), and unknown to the others.
option(MEMWIRE_TEST_TRANSPORT_LOOPBACK "Build the test-only loopback transport" ${MEMWIRE_BUILD_TESTS})
if(MEMWIRE_TEST_TRANSPORT_LOOPBACK)
  memwire_transport(NAME loopback SOURCES src/transport/loopback/*.cpp)
endif()
