// Makes absl::Mutex visible to ThreadSanitizer in -DKVLEARN_SANITIZE=thread
// builds (linked into every target of such a build; nothing else uses it).
//
// Debian's Abseil is not built with -fsanitize=thread, so absl::Mutex::Lock
// and Unlock run uninstrumented (futex and atomics ThreadSanitizer does not
// see), and every access kvlearn guards with an absl::Mutex was reported as a
// race. The linker's --wrap (CMakeLists.txt) sends kvlearn's calls of these
// functions here; each calls the real one between ThreadSanitizer's mutex
// annotations, the ones Abseil itself makes when it is built with the
// sanitizer. The symbols are those of Debian 12's Abseil (inline namespace
// debian3), the only ones kvlearn's objects reference (nm: Lock, Unlock,
// ReaderLock, ReaderUnlock, the destructor).
#include <sanitizer/tsan_interface.h>

extern "C" {

void __real__ZN4absl7debian35Mutex4LockEv(void* mu);
void __real__ZN4absl7debian35Mutex6UnlockEv(void* mu);
void __real__ZN4absl7debian35Mutex10ReaderLockEv(void* mu);
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu);
void __real__ZN4absl7debian35MutexD1Ev(void* mu);

// absl::Mutex::Lock
void __wrap__ZN4absl7debian35Mutex4LockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}

// absl::Mutex::Unlock
void __wrap__ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

// absl::Mutex::ReaderLock
void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

// absl::Mutex::ReaderUnlock
void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

// absl::Mutex::~Mutex. No __tsan_mutex_destroy: the constructor is inline
// (constexpr), so it cannot announce a new mutex, and a mutex built where a
// destroyed one lived was then reported as a "double lock of a destroyed
// mutex" at its first Lock. Freeing the memory drops ThreadSanitizer's state
// of the mutex anyway, and a lock after free is AddressSanitizer's to find.
void __wrap__ZN4absl7debian35MutexD1Ev(void* mu) { __real__ZN4absl7debian35MutexD1Ev(mu); }

}  // extern "C"
