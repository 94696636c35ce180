# Worker (connector + channel) in one process, and the example graph workers as real processes
# over both channels: built into memwire_sideband_tests, with the HTTP channel they start on.
if(NOT TARGET memwire_sideband_tests)
  return()
endif()
target_sources(memwire_sideband_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/worker_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph_workers_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/telemetry_process_test.cpp)
