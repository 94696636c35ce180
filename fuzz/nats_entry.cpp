// The NATS KV entry codec: a stored entry (or a responder's reply) comes from whoever can write
// the bucket. decode_entry() must give an entry or throw Error{InvalidMetadata}; an entry must
// survive its own encoding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "memwire/error.hpp"
#include "nats/entry.hpp"

namespace nats = memwire::sideband::nats_detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto entry = nats::decode_entry(bytes, "fuzz.name");
    (void)entry.expired(0);
    if (entry.parts > 0) {
      auto again = nats::decode_entry(
          nats::encode_parts(entry.parts, entry.part_key, entry.size, entry.expires_at_ms),
          "fuzz.name");
      if (again.parts != entry.parts || again.part_key != entry.part_key ||
          again.size != entry.size || again.expires_at_ms != entry.expires_at_ms)
        std::abort();
    } else if (!entry.metadata_json.empty()) {
      auto again = nats::decode_entry(nats::encode_inline(entry.metadata_json, entry.expires_at_ms),
                                      "fuzz.name");
      if (again.expires_at_ms != entry.expires_at_ms) std::abort();
    }
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::InvalidMetadata) std::abort();
  }
  return 0;
}
