// Must not compile (tests/CMakeLists.txt, NodiscardRejects*): a bare begin_read starts a
// transfer and cancels it at once when the discarded operation dies. With
// -DMEMWIRE_KEEP_RESULT it must compile, which proves the failure is the discarded result.
#include <memwire/memwire.hpp>

void start_and_drop(memwire::Connector& connector, const memwire::RdmaMetadata& md,
                    memwire::Descriptor d) {
#ifdef MEMWIRE_KEEP_RESULT
  auto read = connector.begin_read(md, {d});
  read.cancel();
#else
  connector.begin_read(md, {d});
#endif
}
