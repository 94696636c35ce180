#pragma once
// The endpoint, as both metadata documents read and write it (docs/PROTOCOL.md).

#include "memwire/metadata.hpp"
#include "metadata/json_reader.hpp"
#include "util/json_writer.hpp"

namespace memwire::detail {

// How to reach the owner: connector, host, and the transports, best first.
Endpoint endpoint_value(ondemand::value& value, const Path& where);

// Table rows both documents have, reading into `read.fields.*member` (a Field's `read`): a
// 32-hex-digit id (the key, the token) and the endpoint.
template <auto member>
constexpr auto read_id = [](auto& read, ondemand::value& value, const Path& path) {
  read.fields.*member = id_value(value, path);
};
template <auto member>
constexpr auto read_endpoint = [](auto& read, ondemand::value& value, const Path& path) {
  read.fields.*member = endpoint_value(value, path);
};

// Fields in name order, as the documents always had them; an offer's keys and attributes only
// when it has some.
void write_endpoint(JsonWriter& out, const Endpoint& endpoint);

}  // namespace memwire::detail
