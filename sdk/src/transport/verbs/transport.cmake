# verbs: RDMA over RC queue pairs (libibverbs, librdmacm), with the MEMWIRE_RDMA_* settings.
# Built when its libraries are found (MEMWIRE_WITH_VERBS: AUTO, ON or OFF). Their targets are
# global: the verbs tests and the lab's guest programs use raw verbs too.
memwire_backend_wanted(VERBS wanted)
if(wanted)
  pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET GLOBAL libibverbs)
  pkg_check_modules(RDMACM QUIET IMPORTED_TARGET GLOBAL librdmacm)
endif()
memwire_backend(NAME VERBS DESCRIPTION "RDMA verbs transport" FOUND IBVERBS_FOUND RDMACM_FOUND
                MISSING "libibverbs-dev, librdmacm-dev")
memwire_transport(NAME verbs ENABLED MEMWIRE_HAVE_VERBS ENVIRONMENT
  SOURCES src/transport/verbs/*.cpp
  LIBRARIES PkgConfig::IBVERBS PkgConfig::RDMACM
  PKG_CONFIG_LIBS -libverbs -lrdmacm)
