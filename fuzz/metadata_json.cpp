// RdmaMetadata::from_json: every by-name fetch parses metadata a remote published. Anything but
// a metadata or Error{InvalidMetadata} is a finding; so is metadata whose own JSON does not
// parse back to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "memwire/error.hpp"
#include "memwire/metadata.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    auto metadata = memwire::RdmaMetadata::from_json(json);
    (void)metadata.total_size();
    auto again = memwire::RdmaMetadata::from_json(metadata.to_json());
    if (!(again == metadata)) std::abort();  // to_json lost or changed something
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::InvalidMetadata) std::abort();
  }
  return 0;
}
