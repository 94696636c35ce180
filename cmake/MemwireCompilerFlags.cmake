# Compiler flags every memwire target shares: warnings (errors only when asked: a newer compiler's
# new warning must never break a user's build), sanitizers, and the coverage instrumentation the
# libFuzzer targets need.

option(MEMWIRE_WERROR "Treat compiler warnings as errors (CI turns this on)" OFF)
set(MEMWIRE_SANITIZE "" CACHE STRING "Sanitizers to build with: '', 'address,undefined' or 'thread'")
option(MEMWIRE_BUILD_FUZZERS "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

add_compile_options(-Wall -Wextra -Wpedantic)
# GCC 12 at -O2/-O3 reports false -Wrestrict overlaps inside libstdc++'s std::string when it
# inlines `"text" + string` and friends (GCC bugs 105329, 105651; fixed in GCC 13): it fires
# at random concatenations across the tree (connect_tcp, Arguments, ...) and says nothing true.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  add_compile_options(-Wno-restrict)
endif()
if(MEMWIRE_WERROR)
  add_compile_options(-Werror)
endif()

if(MEMWIRE_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MEMWIRE_BUILD_FUZZERS needs clang (libFuzzer): "
                        "configure with CC=clang CXX=clang++")
  endif()
  # A fuzzer without sanitizers only finds crashes; with them it finds what a crash hides.
  if(NOT MEMWIRE_SANITIZE)
    message(STATUS "memwire: fuzzers build with MEMWIRE_SANITIZE=address,undefined")
    set(MEMWIRE_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
  if(MEMWIRE_SANITIZE MATCHES "thread")
    message(FATAL_ERROR "MEMWIRE_BUILD_FUZZERS works with address,undefined, not thread")
  endif()
  # Coverage feedback from the libraries too, not only from the fuzz targets; the fuzz targets
  # add -fsanitize=fuzzer (libFuzzer's main) themselves. Other programs stay ordinary: the
  # sanitizer runtime they link provides the coverage callbacks.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(MEMWIRE_SANITIZE)
  add_compile_options(-fsanitize=${MEMWIRE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${MEMWIRE_SANITIZE})
endif()
