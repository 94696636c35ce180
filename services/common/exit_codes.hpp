#pragma once

#include <exception>
#include <string_view>

namespace memwire::services {

// Exit statuses shared by the programs: scripts branch on them.
enum ExitCode : int { kOk = 0, kFailed = 1, kUsage = 2, kNotFound = 3, kTimeout = 4 };

// Prints the error as one line on stderr ("PROGRAM: what") and returns its exit status.
int report_failure(std::string_view program, std::exception_ptr error);

}  // namespace memwire::services
