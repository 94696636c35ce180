#pragma once

#include <string>

namespace memwire::sideband::http {

// Who owns a stored name, as the state file records it: a digest of the token, so that a
// restart (or a reordered grant file) still knows what each token holds, and the file holds
// no token. "" = no authentication.
std::string owner_of_token(const std::string& token);

}  // namespace memwire::sideband::http
