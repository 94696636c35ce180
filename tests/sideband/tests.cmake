# Sideband tests, in folders that mirror sideband/src (tests/README.md): each channel registers
# its own in tests/sideband/<channel>/tests.cmake, then worker/ adds the Worker's.
foreach(folder http nats worker)
  include(${CMAKE_CURRENT_LIST_DIR}/${folder}/tests.cmake)
endforeach()
