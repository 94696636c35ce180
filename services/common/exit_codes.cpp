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

Failure describe_failure(std::string_view program, std::exception_ptr error) {
  Failure failure{kFailed, {}};
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    failure = {kUsage, std::string(e.what()) + " (see " + std::string(program) + " --help)"};
  } catch (const Error& e) {
    if (e.code() == ErrorCode::NotFound) failure.status = kNotFound;
    if (e.code() == ErrorCode::Timeout) failure.status = kTimeout;
    failure.message = e.what();
  } catch (const std::exception& e) {
    failure.message = e.what();
  } catch (...) {
    failure.message = "unknown failure";
  }
  failure.message = one_line(failure.message);
  return failure;
}

int report_failure(std::string_view program, std::exception_ptr error) {
  auto failure = describe_failure(program, error);
  std::cerr << program << ": " << failure.message << std::endl;
  return failure.status;
}

}  // namespace memwire::services
