// The verbs transport's control messages (SENDs on the data QP) and rdma_cm hello private
// data: both come from the peer. decode() must return a notice or throw Error{Protocol} (keys
// included: at most kMaxKeys, none beside a text);
// a decoded notice must encode and decode back to itself; decode_hello() never throws.
#include "transport/verbs/verbs_wire.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

namespace verbs = memwire::detail::verbs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto notice = verbs::decode(bytes);
    std::array<std::byte, verbs::kNoticeBytes> buffer{};
    auto used = verbs::encode(notice, buffer);
    auto again = verbs::decode(std::span(buffer).first(used));
    if (again.type != notice.type || again.seq != notice.seq || again.key != notice.key ||
        again.token != notice.token || again.kind != notice.kind || again.error != notice.error ||
        again.text != notice.text || again.first_index != notice.first_index ||
        again.rkeys != notice.rkeys || again.bytes != notice.bytes ||
        again.generation != notice.generation || again.tag != notice.tag)
      std::abort();
  } catch (const memwire::Error& error) {
    if (error.code() != memwire::ErrorCode::Protocol) std::abort();
  }
  if (auto name = verbs::decode_hello(data, size)) {
    auto encoded = verbs::encode_hello(*name, verbs::kAcceptPrivateData);
    auto decoded = verbs::decode_hello(encoded.data(), encoded.size());
    // A long name is cut to what fits: the round trip keeps a prefix of it.
    if (!decoded || !name->starts_with(*decoded)) std::abort();
  }
  return 0;
}
