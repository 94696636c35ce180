// NatsChannel with TLS (server certificate, mutual TLS) and NKey authentication, against a real
// nats-server. Certificates come from the openssl tool; the NKey is made here with libcrypto.

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/sideband/nats.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"
#include "support/nats_server.hpp"
#include "support/temp_dir.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using namespace memwire::test_support;

bool have_openssl_tool() { return std::system("openssl version >/dev/null 2>&1") == 0; }

// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
void make_certificates(const TempDir& dir) {
  std::ofstream(dir.file("server.ext")) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  std::ofstream(dir.file("client.ext")) << "extendedKeyUsage=clientAuth\n";
  const std::string d = dir.file("");
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::vector<std::string> commands = {
      "openssl req -x509 " + ec + " -keyout " + d + "ca.key -out " + d +
          "ca.pem -days 2 -subj '/CN=memwire test CA'",
      "openssl req " + ec + " -keyout " + d + "server.key -out " + d +
          "server.csr -subj '/CN=127.0.0.1'",
      "openssl x509 -req -in " + d + "server.csr -CA " + d + "ca.pem -CAkey " + d +
          "ca.key -CAcreateserial -out " + d + "server.pem -days 2 -extfile " + d + "server.ext",
      "openssl req " + ec + " -keyout " + d + "client.key -out " + d +
          "client.csr -subj '/CN=memwire client'",
      "openssl x509 -req -in " + d + "client.csr -CA " + d + "ca.pem -CAkey " + d +
          "ca.key -CAcreateserial -out " + d + "client.pem -days 2 -extfile " + d + "client.ext",
  };
  for (const auto& command : commands) {
    ASSERT_EQ(std::system((command + " >/dev/null 2>&1").c_str()), 0) << command;
  }
}

// A server that speaks TLS with make_certificates' server certificate.
NatsServerOptions tls_server(const TempDir& dir) {
  NatsServerOptions options;
  options.tls_cert_file = dir.file("server.pem");
  options.tls_key_file = dir.file("server.key");
  return options;
}

TEST(NatsChannelTls, ServerCertificateCheckedAgainstTheCa) {
  if (!have_openssl_tool()) GTEST_SKIP() << "the openssl tool is needed to make certificates";
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(make_certificates(dir));
  auto server_options = tls_server(dir);
  NatsServer server(server_options);

  NatsOptions options;
  options.servers = {server.url()};
  options.ca_file = dir.file("ca.pem");
  NatsChannel channel(options);
  channel.publish("over.tls", sample_metadata(1), 0ms);
  EXPECT_EQ(channel.fetch("over.tls", 2s), sample_metadata(1));

  // Without the CA the self-made server certificate is not trusted.
  options.ca_file.clear();
  options.tls = true;
  EXPECT_EQ(error_code_of([&] { NatsChannel untrusting(options); }), ErrorCode::Transport);
}

TEST(NatsChannelTls, TlsUrlNeverFallsBackToPlainText) {
  NatsServer plain;
  NatsOptions options;
  options.servers = {"tls://127.0.0.1:" + std::to_string(plain.port())};
  try {
    NatsChannel channel(options);
    ADD_FAILURE() << "connected in plain text to a tls:// URL";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Transport) << error.what();
  }
}

TEST(NatsChannelTls, MutualTlsNeedsAClientCertificate) {
  if (!have_openssl_tool()) GTEST_SKIP() << "the openssl tool is needed to make certificates";
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(make_certificates(dir));
  auto server_options = tls_server(dir);
  server_options.tls_ca_file = dir.file("ca.pem");
  server_options.tls_verify_clients = true;
  NatsServer server(server_options);

  NatsOptions options;
  options.servers = {server.url()};
  options.ca_file = dir.file("ca.pem");
  options.connect_timeout = 1s;
  const auto refused = error_code_of([&] { NatsChannel anonymous(options); });
  EXPECT_TRUE(refused == ErrorCode::Transport || refused == ErrorCode::AccessDenied);

  options.cert_file = dir.file("client.pem");
  options.key_file = dir.file("client.key");
  NatsChannel channel(options);
  channel.publish("mutual.tls", sample_metadata(1), 0ms);
  EXPECT_EQ(channel.fetch("mutual.tls", 2s), sample_metadata(1));

  options.key_file.clear();  // half a key pair is a usage error
  EXPECT_EQ(error_code_of([&] { NatsChannel half(options); }), ErrorCode::InvalidArgument);
}

// NKeys: an Ed25519 key, base32-encoded with a type prefix and a CRC-16 (XMODEM) at the end.
std::uint16_t crc16(const std::vector<std::uint8_t>& data) {
  std::uint16_t crc = 0;
  for (auto byte : data) {
    crc ^= static_cast<std::uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string nkey_encode(std::vector<std::uint8_t> raw) {
  auto crc = crc16(raw);
  raw.push_back(static_cast<std::uint8_t>(crc & 0xff));
  raw.push_back(static_cast<std::uint8_t>(crc >> 8));
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (auto byte : raw) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 31];
  return out;
}

struct UserNkey {
  std::string public_key;  // "U..."
  std::string seed;        // "SU..."
};

UserNkey make_user_nkey() {
  constexpr std::uint8_t kUser = 20 << 3;
  constexpr std::uint8_t kSeed = 18 << 3;
  std::array<std::uint8_t, 32> seed{};
  EXPECT_EQ(RAND_bytes(seed.data(), static_cast<int>(seed.size())), 1);
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), 32);
  std::array<std::uint8_t, 32> public_key{};
  std::size_t length = public_key.size();
  EXPECT_EQ(EVP_PKEY_get_raw_public_key(key, public_key.data(), &length), 1);
  EVP_PKEY_free(key);

  std::vector<std::uint8_t> public_raw = {kUser};
  public_raw.insert(public_raw.end(), public_key.begin(), public_key.end());
  std::vector<std::uint8_t> seed_raw = {static_cast<std::uint8_t>(kSeed | (kUser >> 5)),
                                        static_cast<std::uint8_t>((kUser & 31) << 3)};
  seed_raw.insert(seed_raw.end(), seed.begin(), seed.end());
  return {nkey_encode(public_raw), nkey_encode(seed_raw)};
}

TEST(NatsChannelNkey, SeedFileAuthenticates) {
  const auto user = make_user_nkey();
  ASSERT_EQ(user.public_key.front(), 'U');
  ASSERT_EQ(user.seed.substr(0, 2), "SU");
  NatsServerOptions server_options;
  server_options.nkey = user.public_key;
  NatsServer server(server_options);
  TempDir dir;
  std::ofstream(dir.file("user.nk")) << user.seed << "\n";

  NatsOptions options;
  options.servers = {server.url()};
  options.nkey_public = user.public_key;
  options.nkey_seed_file = dir.file("user.nk");
  NatsChannel channel(options);
  channel.publish("with.nkey", sample_metadata(1), 0ms);
  EXPECT_EQ(channel.fetch("with.nkey", 2s), sample_metadata(1));

  // Someone else's key is refused.
  const auto stranger = make_user_nkey();
  std::ofstream(dir.file("stranger.nk")) << stranger.seed << "\n";
  options.nkey_public = stranger.public_key;
  options.nkey_seed_file = dir.file("stranger.nk");
  EXPECT_EQ(error_code_of([&] { NatsChannel refused(options); }), ErrorCode::AccessDenied);
  // And so is nobody.
  options.nkey_public.clear();
  options.nkey_seed_file.clear();
  EXPECT_EQ(error_code_of([&] { NatsChannel refused(options); }), ErrorCode::AccessDenied);
}

}  // namespace
}  // namespace memwire::sideband
