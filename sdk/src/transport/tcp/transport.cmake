# tcp: the stream protocol over TCP sockets, the fallback every host has.
memwire_transport(NAME tcp SOURCES src/transport/tcp/*.cpp)
