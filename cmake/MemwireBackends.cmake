# Optional backends, detected at build time: MEMWIRE_WITH_<NAME> is AUTO (on when its libraries
# are found), ON (required: configuring fails without them) or OFF. The outcome is
# MEMWIRE_HAVE_<NAME> (ON/OFF), which the sdk, sideband, services and tests build from (a
# transport's, in the sdk's scope: outside it, ask for its unit, TARGET memwire-transport-<name>).

# memwire_backend(NAME <name> DESCRIPTION <text> FOUND <variables, all true when found...>
#                 MISSING <what to install>)
function(memwire_backend)
  cmake_parse_arguments(arg "" "NAME;DESCRIPTION;MISSING" "FOUND" ${ARGN})
  set(found TRUE)
  foreach(variable ${arg_FOUND})
    if(NOT ${variable})
      set(found FALSE)
    endif()
  endforeach()
  set(switch MEMWIRE_WITH_${arg_NAME})
  set(${switch} AUTO CACHE STRING "${arg_DESCRIPTION}: AUTO (when found), ON (required) or OFF")
  set_property(CACHE ${switch} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${switch}}" wanted)
  if(wanted STREQUAL "OFF" OR wanted STREQUAL "FALSE" OR wanted STREQUAL "0" OR wanted STREQUAL "NO")
    set(have OFF)
  elseif(found)
    set(have ON)
  elseif(wanted STREQUAL "AUTO")
    set(have OFF)
  else()
    message(FATAL_ERROR "${switch}=${${switch}} but its libraries are missing (${arg_MISSING}); "
                        "install them or configure with -D${switch}=OFF")
  endif()
  message(STATUS "memwire: ${arg_DESCRIPTION}: ${have} (${switch}=${${switch}})")
  set(MEMWIRE_HAVE_${arg_NAME} ${have} PARENT_SCOPE)
endfunction()

# memwire_backend_wanted(<name> <variable>): <variable> is false when MEMWIRE_WITH_<name> switches
# the backend off. Its libraries are looked up only when wanted: an OFF build needs none of them.
function(memwire_backend_wanted name variable)
  if(MEMWIRE_WITH_${name} MATCHES "^(OFF|off|Off|FALSE|false|0|NO|no)$")
    set(${variable} FALSE PARENT_SCOPE)
  else()
    set(${variable} TRUE PARENT_SCOPE)
  endif()
endfunction()

# The sideband's channels. A transport that needs libraries looks them up in its own
# transport.cmake (sdk/src/transport/<name>/), with these functions too.
memwire_backend_wanted(NATS wanted)
if(wanted)
  pkg_check_modules(LIBNATS QUIET IMPORTED_TARGET libnats)
endif()
memwire_backend(NAME NATS DESCRIPTION "NATS sideband channel" FOUND LIBNATS_FOUND
                MISSING "libnats-dev")

memwire_backend_wanted(HTTP wanted)
if(wanted)
  pkg_check_modules(CPP_HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)  # Debian ships no CMake package
  pkg_check_modules(LIBCURL QUIET IMPORTED_TARGET libcurl)
  find_package(OpenSSL QUIET)
endif()
memwire_backend(NAME HTTP DESCRIPTION "HTTP sideband endpoint and channel"
                FOUND CPP_HTTPLIB_FOUND LIBCURL_FOUND OPENSSL_FOUND
                MISSING "libcpp-httplib-dev, libcurl4-openssl-dev, libssl-dev")
