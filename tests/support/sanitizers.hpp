#pragma once

// MEMWIRE_TEST_UNDER_SANITIZER is 1 in ASan and TSan builds, with GCC (which defines
// __SANITIZE_*__) and with clang (which, before clang 17, only answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MEMWIRE_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MEMWIRE_TEST_UNDER_SANITIZER 1
#endif
#endif
#ifndef MEMWIRE_TEST_UNDER_SANITIZER
#define MEMWIRE_TEST_UNDER_SANITIZER 0
#endif
