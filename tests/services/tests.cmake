# The programs in services/: the memwire CLI as a real process against a real memwire-registry
# and a real nats-server, and the parts it is built from (arguments, token files, mapped files,
# the progress line) directly.
if(NOT TARGET memwire-cli)  # services/ is built only with the HTTP channel
  return()
endif()
add_executable(memwire_services_tests
  ${CMAKE_CURRENT_LIST_DIR}/cli_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parts_test.cpp)
target_link_libraries(memwire_services_tests
  PRIVATE memwire-cli-parts memwire_test_support GTest::gtest_main Threads::Threads)
memwire_test_programs(memwire_services_tests registry_program=memwire-registry
  cli_program=memwire-cli)
gtest_discover_tests(memwire_services_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
