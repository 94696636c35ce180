#include "common/exit_codes.hpp"

#include <iostream>
#include <string>

#include "common/arguments.hpp"
#include "memwire/error.hpp"

namespace memwire::services {
namespace {

// One line, whatever the message holds.
std::string one_line(std::string text) {
  for (auto& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

int report_failure(std::string_view program, std::exception_ptr error) {
  int status = kFailed;
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    status = kUsage;
    message = std::string(e.what()) + " (see " + std::string(program) + " --help)";
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotFound) status = kNotFound;
    if (e.code() == ErrorCode::Timeout) status = kTimeout;
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown failure";
  }
  std::cerr << program << ": " << one_line(message) << std::endl;
  return status;
}

}  // namespace memwire::services
