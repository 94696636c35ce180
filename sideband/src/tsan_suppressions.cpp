// Compiled into each program that links memwire::sideband, in ThreadSanitizer builds only.
//
// libcpp-httplib is a prebuilt library without TSan instrumentation: its function-local statics
// (std::regex objects) are published through a guard byte read inline, which TSan cannot see,
// so their first use on a second server thread looks like a race. Reports inside it are noise.
//
// nats.c's TLS connect (uninstrumented libnats and libcrypto) frees an OpenSSL lock on its own
// thread right after the connecting thread released it; TSan sees only the lock's memory, not
// the handover inside OpenSSL (seen once in NatsChannelTls.MutualTlsNeedsAClientCertificate).
// Visible although the tree builds with -fvisibility=hidden: the TSan runtime looks it up in the
// program's dynamic symbols.
extern "C" __attribute__((visibility("default"))) const char* __tsan_default_suppressions() {
  return "called_from_lib:libcpp-httplib.so\n"
         "race:CRYPTO_THREAD_lock_free\n";
}
