// How many times slower than a normal build this test binary runs, for tests
// that must meet a real deadline (a client's RPC deadline the sidecar has to
// answer within). ThreadSanitizer (the CI tsan stage) slows code 5-15 times
// and the gRPC threads under it more; AddressSanitizer with UBSan (the asan
// stage) 2-5 times, enough that a 50 ms flush with a first connection missed
// its deadline in 3 of 6 runs on a 2-core machine. A deadline of a normal
// build scaled by this keeps such a test meaningful there instead of leaving
// it out.
#pragma once

namespace kvlearn {

#if defined(__SANITIZE_THREAD__)  // GCC
inline constexpr int kSanitizerSlowdown = 10;
#elif defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr int kSanitizerSlowdown = 5;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)  // clang
inline constexpr int kSanitizerSlowdown = 10;
#elif __has_feature(address_sanitizer)
inline constexpr int kSanitizerSlowdown = 5;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace kvlearn
