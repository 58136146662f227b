// Marks the hand-offs of an object between threads that a library orders
// where ThreadSanitizer cannot see it: Debian's gRPC is not instrumented, so
// the order it gives a reactor's construction, reactions, OnDone and alarms
// is invisible, and each access after a hand-off was reported as a race.
// What a thread did before TsanHandOff(p) is seen to happen before what a
// thread does after a later TsanTakeOver(p). Both are no-ops unless built
// with -fsanitize=thread.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define KVLEARN_TSAN_HAND_OFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVLEARN_TSAN_HAND_OFF 1
#endif
#endif

#ifdef KVLEARN_TSAN_HAND_OFF
#include <sanitizer/tsan_interface.h>
#endif

namespace kvlearn {

inline void TsanHandOff([[maybe_unused]] const void* object) {
#ifdef KVLEARN_TSAN_HAND_OFF
  __tsan_release(const_cast<void*>(object));
#endif
}

inline void TsanTakeOver([[maybe_unused]] const void* object) {
#ifdef KVLEARN_TSAN_HAND_OFF
  __tsan_acquire(const_cast<void*>(object));
#endif
}

}  // namespace kvlearn
