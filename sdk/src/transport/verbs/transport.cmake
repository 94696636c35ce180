# verbs: RDMA over RC queue pairs (libibverbs, librdmacm), with the MEMWIRE_RDMA_* settings.
memwire_transport(NAME verbs ENABLED MEMWIRE_HAVE_VERBS ENVIRONMENT
  SOURCES src/transport/verbs/*.cpp
  LIBRARIES PkgConfig::IBVERBS PkgConfig::RDMACM)
