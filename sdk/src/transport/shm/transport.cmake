# shm: the stream protocol over a Unix socket within one host, bytes copied across processes.
memwire_transport(NAME shm SOURCES src/transport/shm/*.cpp)
