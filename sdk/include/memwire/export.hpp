#pragma once

// What libmemwire.so and libmemwire-sideband.so export: the libraries are built with
// -fvisibility=hidden, so only declarations marked MEMWIRE_API are visible to programs; the
// internals (sdk/src, sideband/src) stay inside. On ELF the same mark serves both the build of
// the library and its users.
#if defined(__GNUC__) || defined(__clang__)
#define MEMWIRE_API [[gnu::visibility("default")]]
#else
#define MEMWIRE_API
#endif
