#pragma once

#include <gtest/gtest.h>

#include "memwire/error.hpp"

namespace memwire::test_support {

// The code of the memwire::Error that `call` throws; a test failure when it throws none.
template <typename Call>
ErrorCode error_code_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.code();
  }
  ADD_FAILURE() << "no memwire::Error thrown";
  return ErrorCode::Protocol;
}

}  // namespace memwire::test_support
