#pragma once

// What libmemwire.so and libmemwire-sideband.so export: the libraries are built with
// -fvisibility=hidden, so only declarations marked MEMWIRE_API are visible to programs; the
// internals (sdk/src, sideband/src) stay inside. On ELF the same mark serves both the build of
// the library and its users.
// MEMWIRE_HIDDEN marks an exported class's private part (its pimpl, defined in the library):
// a nested class takes the visibility of the class it is in, so it needs saying.
#if defined(__GNUC__) || defined(__clang__)
#define MEMWIRE_API [[gnu::visibility("default")]]
#define MEMWIRE_HIDDEN [[gnu::visibility("hidden")]]
#else
#define MEMWIRE_API
#define MEMWIRE_HIDDEN
#endif
