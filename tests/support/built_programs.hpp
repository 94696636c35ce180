#pragma once

// The programs a test starts (a peer process, the CLI, the registry, the graph workers), at
// their paths in the build that made the test. Each test program gets them from a small file
// generated for it (memwire_test_programs in tests/CMakeLists.txt) rather than from its compile
// line: a path of one build folder on every test's compile line would keep a compiler cache
// from serving one build's test objects to another (the no-NATS variant, the pip build).
// A program a test binary was not built with is a link error, not a wrong path.
namespace memwire::test {

const char* peer_program();             // tests/support/test_peer.cpp
const char* grant_writer_program();     // tests/support/grant_writer.cpp
const char* transfer_opener_program();  // tests/support/transfer_opener_peer.cpp
const char* registry_program();         // services: memwire-registry
const char* cli_program();              // services: memwire
const char* producer_program();         // services: memwire-producer
const char* consumer_program();         // services: memwire-consumer

}  // namespace memwire::test
