# Sideband tests: each channel registers its own in tests/sideband/<part>_tests.cmake.
file(GLOB memwire_sideband_test_parts CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_tests.cmake)
foreach(part ${memwire_sideband_test_parts})
  include(${part})
endforeach()
