// RdmaMetadata::from_json: every by-name fetch parses metadata a remote published. Anything but
// a metadata or Error{InvalidMetadata} is a finding; so is metadata whose own JSON does not
// parse back to the same value, and a descriptor list that the quick reader of to_json's form
// (sdk/src/metadata/canonical_descriptors.hpp) reads otherwise than the parser does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "parse_metadata.hpp"

namespace {

constexpr auto parse = parse_metadata<memwire::RdmaMetadata>;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const auto metadata = parse(json);
  if (metadata) {
    (void)metadata->total_size();
    const auto again = parse(metadata->to_json());
    if (!again || !(*again == *metadata)) std::abort();  // to_json lost or changed something
  }
  // A space after the list's '[' keeps the document the same but sends it through the parser.
  constexpr std::string_view kHead = "{\"descriptors\":[";
  if (json.starts_with(kHead)) {
    const auto parsed = parse(std::string(kHead) + " " + std::string(json.substr(kHead.size())));
    if (parsed.has_value() != metadata.has_value() || (parsed && !(*parsed == *metadata)))
      std::abort();
  }
  return 0;
}
