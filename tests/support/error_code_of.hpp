#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "memwire/error.hpp"

namespace memwire::test_support {

// The memwire::Error that `call` throws (its code and message); a test failure, and a Protocol
// error, when it throws none.
template <typename Call>
Error error_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no memwire::Error thrown";
  return Error(ErrorCode::Protocol, "nothing thrown");
}

// The code of the memwire::Error that `call` throws; a test failure when it throws none.
template <typename Call>
ErrorCode error_code_of(Call&& call) {
  return error_of(std::forward<Call>(call)).code();
}

// The message of the memwire::Error that `call` throws (error_of's).
template <typename Call>
std::string message_of(Call&& call) {
  return error_of(std::forward<Call>(call)).what();
}

}  // namespace memwire::test_support
