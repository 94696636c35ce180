# tcp's own tests (sdk/src/transport/tcp/ and the stream protocol as tcp runs it): access
# control, piece requests, pipelined answers, connection limits, unreadable sources, a hostile
# owner. In memwire_sdk_tests.
target_sources(memwire_sdk_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/access_control_test.cpp ${CMAKE_CURRENT_LIST_DIR}/piece_request_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pipelined_answers_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/connection_limits_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unreadable_source_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hostile_owner_test.cpp)
