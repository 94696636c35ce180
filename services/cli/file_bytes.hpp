#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace memwire::cli {

// Whole files in and out of memory, with errors that name the file.
std::vector<std::byte> read_file(const std::string& path);
void write_file(const std::string& path, const std::vector<std::byte>& bytes);

}  // namespace memwire::cli
