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
