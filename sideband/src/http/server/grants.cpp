// Bearer tokens scoped to a role and a name prefix: the text format of a grant file.

#include <fstream>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"

namespace memwire::sideband {
namespace {

constexpr std::size_t kMinTokenLength = 16;
constexpr std::size_t kMaxTokenLength = 4096;

[[noreturn]] void refuse(std::size_t line, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, "grants, line " + std::to_string(line) + ": " + why);
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t pos = 0;
  while (pos < line.size() && fields.size() <= 3) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    if (pos == line.size()) break;
    std::size_t end = pos;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

}  // namespace

std::vector<HttpGrant> parse_http_grants(std::string_view text) {
  std::vector<HttpGrant> grants;
  std::size_t number = 0;
  while (!text.empty()) {
    auto newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++number;
    if (number > kMaxGrants) refuse(number, "more than " + std::to_string(kMaxGrants) + " lines");
    if (line.ends_with('\r')) line.remove_suffix(1);
    for (char c : line) {
      if (c != '\t' &&
          (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e))
        refuse(number, "holds a byte that is not printable ASCII");
    }
    auto fields = fields_of(line);
    if (fields.empty() || fields.front().starts_with('#')) continue;
    if (fields.size() != 3) refuse(number, "needs exactly three fields: TOKEN ROLE PREFIX");
    HttpGrant grant;
    grant.token = fields[0];
    if (grant.token.size() < kMinTokenLength || grant.token.size() > kMaxTokenLength) {
      refuse(number, "the token must be " + std::to_string(kMinTokenLength) + " to " +
                         std::to_string(kMaxTokenLength) + " characters long");
    }
    if (fields[1] == "read") {
      grant.role = HttpGrant::Role::Read;
    } else if (fields[1] == "publish") {
      grant.role = HttpGrant::Role::Publish;
    } else {
      refuse(number, "the role must be 'read' or 'publish'");
    }
    if (fields[2] != "*") {
      try {
        validate_name(fields[2]);
      } catch (const Error& error) {
        refuse(number, "the prefix must be a name or '*': " + std::string(error.message()));
      }
      grant.prefix = fields[2];
    }
    for (const auto& earlier : grants) {
      if (earlier.token == grant.token) refuse(number, "repeats a token of an earlier line");
    }
    grants.push_back(std::move(grant));
  }
  return grants;
}

std::vector<HttpGrant> load_http_grants(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorCode::InvalidArgument, "grants: cannot read " + path);
  std::string text(kMaxGrantFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad()) throw Error(ErrorCode::InvalidArgument, "grants: cannot read " + path);
  text.resize(static_cast<std::size_t>(file.gcount()));
  if (text.size() > kMaxGrantFileBytes) {
    throw Error(ErrorCode::InvalidArgument, "grants: " + path + " is larger than " +
                                                std::to_string(kMaxGrantFileBytes) + " bytes");
  }
  return parse_http_grants(text);
}

}  // namespace memwire::sideband
