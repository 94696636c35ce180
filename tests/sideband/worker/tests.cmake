# Worker (connector + channel) in one process, and the example graph workers as real processes
# over both channels: built into memwire_sideband_tests, with the HTTP channel they start on.
# The tests over every channel take their servers from the Channel conformance suite's worlds.
if(NOT TARGET memwire_sideband_tests)
  return()
endif()
target_sources(memwire_sideband_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/worker_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/worker_cancel_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/graph_workers_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/telemetry_process_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../conformance/channel_world.cpp)
if(MEMWIRE_HAVE_NATS)  # the NATS world plants stored documents with nats.c
  target_link_libraries(memwire_sideband_tests PRIVATE PkgConfig::LIBNATS)
endif()
