#include <gtest/gtest.h>

#include "memwire/memwire.hpp"

using namespace memwire;

TEST(Device, ParsesHostNames) {
  EXPECT_EQ(Device::parse("cpu"), Device());
  EXPECT_EQ(Device::parse("host"), Device());
  EXPECT_EQ(Device::parse("cpu").to_string(), "cpu");
  EXPECT_EQ(Device().kind(), DeviceKind::Host);
}

TEST(Device, ParsesCudaNames) {
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceKind::Cuda, 0));
  EXPECT_EQ(Device::parse("cuda:3"), Device(DeviceKind::Cuda, 3));
  EXPECT_EQ(Device::parse("gpu:1"), Device(DeviceKind::Cuda, 1));
  EXPECT_EQ(Device::parse("gpu"), Device(DeviceKind::Cuda, 0));
  EXPECT_EQ(Device(DeviceKind::Cuda, 7).to_string(), "cuda:7");
}

TEST(Device, RejectsAnythingElse) {
  for (const char* text : {"", "CPU", "cuda:", "cuda:-1", "cuda:x", "gpu:1x", "tpu", "cuda 1"}) {
    try {
      Device::parse(text);
      FAIL() << "accepted '" << text << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument) << text;
    }
  }
  EXPECT_THROW((void)Device(DeviceKind::Unspecified), Error);  // (void): not a declaration
  EXPECT_THROW(Device(DeviceKind::Host, 1), Error);
}

TEST(Status, ValuesMatchNixlConnect) {
  EXPECT_EQ(static_cast<int>(OperationStatus::Uninitialized), 0);
  EXPECT_EQ(static_cast<int>(OperationStatus::Initialized), 1);
  EXPECT_EQ(static_cast<int>(OperationStatus::InProgress), 2);
  EXPECT_EQ(static_cast<int>(OperationStatus::Complete), 3);
  EXPECT_EQ(static_cast<int>(OperationStatus::Cancelled), 4);
  EXPECT_EQ(static_cast<int>(OperationStatus::Errored), 5);
  EXPECT_EQ(to_string(OperationStatus::InProgress), "in_progress");
  EXPECT_EQ(to_string(OperationKind::Write), "write");
  EXPECT_EQ(static_cast<int>(OperationKind::Read), 1);
}

TEST(Descriptor, ViewsSpansWithoutCopying) {
  std::vector<float> values(10);
  Descriptor descriptor{std::span(values)};
  EXPECT_EQ(descriptor.ptr(), values.data());
  EXPECT_EQ(descriptor.size(), 40u);
  EXPECT_EQ(descriptor.device(), Device());
}
