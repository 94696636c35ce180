// The NKey signer that stands in for nats.c's seed-file handler (sideband/src/nats/
// nkey_signer.hpp): a signature nats.c 3.4 would send empty is refused before it leaves, and
// every connect with an NKey authenticates.

#include "nats/nkey_signer.hpp"

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "memwire/sideband/nats.hpp"
#include "nats/connection.hpp"
#include "support/nats_server.hpp"
#include "support/temp_dir.hpp"

namespace memwire::sideband::nats_detail {
namespace {

using test_support::NatsServer;
using test_support::NatsServerOptions;
using test_support::TempDir;

// A test key; its signature of kZeroNonce begins with a zero byte (found by trying nonces).
constexpr const char* kPublic = "UCBTKMXUD4NB3WZ22TVBQRIS7KJQK7YREPXUCJOXPW3KHOVHEYJ77RJZ";
constexpr const char* kSeed = "SUAD77J2WWINF6YEIUS4FKFNXSO6T35MOLTHPOUB2DRAERQSGSYLVZJ474";
constexpr const char* kZeroNonce = "nonce-17";
constexpr const char* kPlainNonce = "nonce-1";

struct Signed {
  natsStatus status = NATS_OK;
  std::string signature;
  std::string error;
};

Signed sign_with(NkeySigner& signer, const char* nonce) {
  Signed out;
  char* error = nullptr;
  unsigned char* signature = nullptr;
  int length = 0;
  out.status = NkeySigner::sign(&error, &signature, &length, nonce, &signer);
  if (signature != nullptr) out.signature.assign(reinterpret_cast<char*>(signature), length);
  if (error != nullptr) out.error = error;
  std::free(signature);
  std::free(error);
  return out;
}

std::string nats_sign(const char* nonce) {
  unsigned char* signature = nullptr;
  int length = 0;
  EXPECT_EQ(nats_Sign(kSeed, nonce, &signature, &length), NATS_OK);
  std::string out(reinterpret_cast<char*>(signature), length);
  std::free(signature);
  return out;
}

class NkeySignerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(nats_Open(-1), NATS_OK); }
  TempDir dir_;
};

TEST_F(NkeySignerTest, SignsTheNonceAsNatsSignDoes) {
  std::ofstream(dir_.file("user.nk")) << kSeed << "\n";
  NkeySigner signer(dir_.file("user.nk"));
  auto result = sign_with(signer, kPlainNonce);
  ASSERT_EQ(result.status, NATS_OK) << result.error;
  EXPECT_EQ(result.signature.size(), 64u);
  EXPECT_EQ(result.signature, nats_sign(kPlainNonce));
  EXPECT_FALSE(signer.take_refused_signature());
}

TEST_F(NkeySignerTest, RefusesASignatureThatNatsCWouldSendEmpty) {
  ASSERT_EQ(nats_sign(kZeroNonce).front(), '\0');
  std::ofstream(dir_.file("user.nk")) << kSeed << "\n";
  NkeySigner signer(dir_.file("user.nk"));
  auto result = sign_with(signer, kZeroNonce);
  EXPECT_NE(result.status, NATS_OK);
  EXPECT_TRUE(result.signature.empty());
  EXPECT_NE(result.error.find("zero byte"), std::string::npos) << result.error;
  EXPECT_TRUE(signer.take_refused_signature());
  EXPECT_FALSE(signer.take_refused_signature());
}

TEST_F(NkeySignerTest, ReadsTheSeedFromACredsFileLayout) {
  std::ofstream(dir_.file("user.creds"))
      << "-----BEGIN NATS USER JWT-----\nnot.a.jwt\n------END NATS USER JWT------\n\n"
      << "-----BEGIN USER NKEY SEED-----\n  " << kSeed << "\r\n------END USER NKEY SEED------\n";
  NkeySigner signer(dir_.file("user.creds"));
  auto result = sign_with(signer, kPlainNonce);
  ASSERT_EQ(result.status, NATS_OK) << result.error;
  EXPECT_EQ(result.signature, nats_sign(kPlainNonce));
}

TEST_F(NkeySignerTest, AMissingOrSeedlessFileIsAClearError) {
  NkeySigner missing(dir_.file("absent.nk"));
  auto result = sign_with(missing, kPlainNonce);
  EXPECT_NE(result.status, NATS_OK);
  EXPECT_NE(result.error.find("cannot read"), std::string::npos) << result.error;

  std::ofstream(dir_.file("public.nk")) << kPublic << "\n";
  NkeySigner seedless(dir_.file("public.nk"));
  result = sign_with(seedless, kPlainNonce);
  EXPECT_NE(result.status, NATS_OK);
  EXPECT_NE(result.error.find("no NKey user seed"), std::string::npos) << result.error;
  EXPECT_FALSE(seedless.take_refused_signature());

  // A file far larger than any .creds is refused, not read whole.
  std::ofstream(dir_.file("huge.nk")) << std::string(1 << 20, 'x') << "\n" << kSeed << "\n";
  NkeySigner huge(dir_.file("huge.nk"));
  result = sign_with(huge, kPlainNonce);
  EXPECT_NE(result.status, NATS_OK);
  EXPECT_NE(result.error.find("is over"), std::string::npos) << result.error;
}

// Before the signer, 1 connect in 256 was refused: 700 connects failed at least once 93% of
// the time.
TEST_F(NkeySignerTest, EveryConnectWithAnNkeyAuthenticates) {
  NatsServerOptions server_options;
  server_options.nkey = kPublic;
  NatsServer server(server_options);
  std::ofstream(dir_.file("user.nk")) << kSeed << "\n";
  NatsOptions options;
  options.servers = {server.url()};
  options.nkey_public = kPublic;
  options.nkey_seed_file = dir_.file("user.nk");
  for (int i = 0; i < 700; ++i) {
    try {
      NatsConnection connection(options);
    } catch (const std::exception& error) {
      FAIL() << "connect " << i << " failed: " << error.what();
    }
  }
}

}  // namespace
}  // namespace memwire::sideband::nats_detail
