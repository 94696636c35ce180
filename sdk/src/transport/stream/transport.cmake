# The byte-stream machinery tcp and shm share (connections on event loops, the frame protocol),
# and the MEMWIRE_TCP_* settings both read.
memwire_transport(NAME stream MACHINERY ENVIRONMENT SOURCES src/transport/stream/*.cpp)
