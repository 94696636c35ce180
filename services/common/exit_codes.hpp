#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace memwire::services {

// Exit statuses shared by the programs: scripts branch on them.
enum ExitCode : int { kOk = 0, kFailed = 1, kUsage = 2, kNotFound = 3, kTimeout = 4 };

struct Failure {
  int status;           // the exit status it calls for
  std::string message;  // one line
};
Failure describe_failure(std::string_view program, std::exception_ptr error);

// Prints the error as one line on stderr ("PROGRAM: what") and returns its exit status.
int report_failure(std::string_view program, std::exception_ptr error);

}  // namespace memwire::services
