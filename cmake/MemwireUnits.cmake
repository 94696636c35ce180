# memwire_unit(<target> USING <flags target> SOURCES <globs...> [LIBRARIES <deps...>]): one
# library unit (a transport, a channel, a core): an object library of the sources matching the
# globs (relative to the calling folder), compiled with the include folders of <flags target>
# and its own dependencies. The shared library that links it gets its objects and dependencies.
function(memwire_unit target)
  cmake_parse_arguments(arg "" "USING" "SOURCES;LIBRARIES" ${ARGN})
  set(sources)
  foreach(pattern ${arg_SOURCES})
    file(GLOB found CONFIGURE_DEPENDS ${pattern})
    list(APPEND sources ${found})
  endforeach()
  add_library(${target} OBJECT ${sources})
  target_link_libraries(${target} PRIVATE ${arg_USING} ${arg_LIBRARIES})
endfunction()

# memwire_transport(NAME <name> [MACHINERY] [ENABLED <variable>] [ENVIRONMENT]
#                   SOURCES <globs...> [LIBRARIES <deps...>] [PKG_CONFIG_LIBS <flags...>]):
# called by the transport.cmake of each folder under sdk/src/transport/, which is all a
# transport tells the build. Makes its unit memwire-transport-<name> (when <variable> is true,
# or always without ENABLED) and adds it to the library's units; a transport (not MACHINERY,
# shared code such as stream) also joins the registry's list: make_<name>_transport() builds
# it, and with ENVIRONMENT its folder reads its own MEMWIRE_* variables in
# read_<name>_environment(). A disabled transport is listed as known but not built, so asking
# for it says so. PKG_CONFIG_LIBS: what a static link of memwire needs for it (memwire.pc's
# Libs.private).
function(memwire_transport)
  cmake_parse_arguments(arg "MACHINERY;ENVIRONMENT" "NAME;ENABLED" "SOURCES;LIBRARIES;PKG_CONFIG_LIBS"
                        ${ARGN})
  if(arg_ENABLED AND NOT ${arg_ENABLED})
    if(NOT arg_MACHINERY)
      set(memwire_transports_disabled ${memwire_transports_disabled} ${arg_NAME} PARENT_SCOPE)
    endif()
    return()
  endif()
  memwire_unit(memwire-transport-${arg_NAME} USING memwire-sdk-flags
    SOURCES ${arg_SOURCES} LIBRARIES ${arg_LIBRARIES})
  set(memwire_sdk_units ${memwire_sdk_units} memwire-transport-${arg_NAME} PARENT_SCOPE)
  set(memwire_pkg_config_libs ${memwire_pkg_config_libs} ${arg_PKG_CONFIG_LIBS} PARENT_SCOPE)
  if(arg_ENVIRONMENT)
    set(memwire_environment_readers ${memwire_environment_readers} ${arg_NAME} PARENT_SCOPE)
  endif()
  if(NOT arg_MACHINERY)
    set(memwire_transports ${memwire_transports} ${arg_NAME} PARENT_SCOPE)
  endif()
endfunction()
