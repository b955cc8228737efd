// Whether this test code is built with a sanitizer (the host-asan, host-tsan and fuzz presets), for the few cases
// that must know: the suites' shared helpers (conformance and team).
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PVMM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PVMM_TEST_SANITIZED 1
#endif
#endif

// A loop over a test's own buffer, which one thread owns (a pattern it writes, a copy it checks): not instrumented,
// since a sanitizer has nothing to find there, while instrumented at the test code's -O0 such loops over megabytes
// were most of the team suite's time under TSan and ASan. Memory pvmm maps is read and written by the library
// (pvmm::testing::copy_*_mapping), whose accesses stay checked.
#if defined(__clang__) || defined(__GNUC__)
#define PVMM_TEST_OWN_BUFFER_LOOP __attribute__((no_sanitize("address", "thread")))
#else
#define PVMM_TEST_OWN_BUFFER_LOOP
#endif

namespace pvmm_test {

#ifdef PVMM_TEST_SANITIZED
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif

}  // namespace pvmm_test
