# The stream machinery's own tests (sdk/src/transport/stream/, what tcp and shm share): frames,
# the loop's sends, connecting, a waiter reading its own answer, the owner's bounds, the room kept
# for granted peers, busy polling, what a pool counts as its peers' faults. In memwire_sdk_tests.
target_sources(memwire_sdk_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/stream_frame_test.cpp ${CMAKE_CURRENT_LIST_DIR}/loop_sends_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/connect_signal_test.cpp ${CMAKE_CURRENT_LIST_DIR}/waiter_reads_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/owner_bounds_test.cpp ${CMAKE_CURRENT_LIST_DIR}/busy_poll_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pool_faults_test.cpp ${CMAKE_CURRENT_LIST_DIR}/granted_room_test.cpp)
