#pragma once

#include <string>

namespace memwire::services {

// The token in a --token-file, for every program that takes one: the whole file, less one
// trailing "\n" or "\r\n" (what editors and `echo` leave). Throws UsageError (exit status 2)
// when the file cannot be read, is empty, is larger than 64 KiB, or the token is empty or holds
// any other control character (a stray "\r" or "\n" would make a token nobody can match; an
// empty one would silently turn authentication off).
std::string read_token_file(const std::string& path);

}  // namespace memwire::services
