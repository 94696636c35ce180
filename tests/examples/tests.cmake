# The kv_disagg example as a user runs it, on tcp and on shm: with grants the KV of the request
# that reuses an aborted request's blocks must be intact (exit 0); with --no-grants the example
# must detect the aborted request's late writes in those blocks (its exit status 3), no other
# failure.
if(NOT TARGET memwire-kv-disagg)
  return()
endif()
foreach(transport tcp shm)
  add_test(NAME KvDisagg.Grants.${transport} COMMAND $<TARGET_FILE:memwire-kv-disagg>)
  add_test(NAME KvDisagg.NoGrantsDetectsCorruption.${transport}
    COMMAND sh -c "\"$0\" --no-grants; status=$?; test $status -eq 3 || { echo \"expected exit 3 (corruption detected), got $status\"; exit 1; }"
            $<TARGET_FILE:memwire-kv-disagg>)
  set_tests_properties(KvDisagg.Grants.${transport} KvDisagg.NoGrantsDetectsCorruption.${transport}
    PROPERTIES ENVIRONMENT MEMWIRE_TRANSPORTS=${transport} TIMEOUT 60)
endforeach()
