# shm's own tests (sdk/src/transport/shm/): SharedBuffers and the peer's mappings of them, copies
# across processes and on two CPUs, a broken owner, pools over SharedBuffers, what a peer handed
# a buffer read-only can do with it. In memwire_sdk_tests.
target_sources(memwire_sdk_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/shared_buffer_test.cpp ${CMAKE_CURRENT_LIST_DIR}/broken_owner_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_pool_test.cpp ${CMAKE_CURRENT_LIST_DIR}/peer_mappings_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bulk_copy_test.cpp ${CMAKE_CURRENT_LIST_DIR}/second_cpu_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_memory_test.cpp ${CMAKE_CURRENT_LIST_DIR}/direct_reads_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/read_only_sharing_test.cpp ${CMAKE_CURRENT_LIST_DIR}/hello_credentials_test.cpp)
