// Reads a buffer through an installed memwire: proves headers, library and package work.
#include <iostream>
#include <memwire/memwire.hpp>

int main() {
  memwire::Connector owner, reader;
  std::vector<int> source(1000, 7), target(1000, 0);
  auto readable = owner.create_readable({memwire::Descriptor(std::span(source))});
  auto read = reader.begin_read(readable.metadata(), {memwire::Descriptor(std::span(target))});
  read.wait_for_completion(std::chrono::seconds(10));
  if (target != source) return 1;
  std::cout << "consumer read " << target.size() * sizeof(int) << " bytes over " << read.transport()
            << "\n";
  return 0;
}
