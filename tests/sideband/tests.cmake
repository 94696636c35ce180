# Sideband tests, in folders that mirror sideband/src (tests/README.md): each channel registers
# its own in tests/sideband/<channel>/tests.cmake, worker/ adds the Worker's, and conformance/
# runs the cases every Channel shares over each.
foreach(folder http nats worker conformance)
  include(${CMAKE_CURRENT_LIST_DIR}/${folder}/tests.cmake)
endforeach()
