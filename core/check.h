// KVLEARN_DCHECK(condition): checks a `REQUIRES:` contract. On in debug
// builds (NDEBUG unset) and wherever KVLEARN_DCHECK_ALWAYS_ON is defined
// (`-DKVLEARN_DCHECK=ON` at configure time turns it on for the whole tree);
// compiled out otherwise, because these sit on the replay's hottest path. A
// broken contract prints the condition with file and line and aborts: it is a
// bug in the caller, never a consequence of input (input is checked with
// absl::Status before it reaches a REQUIRES).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvlearn::internal {

[[noreturn]] inline void DcheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: REQUIRES broken: %s\n", file, line, condition);
  std::abort();
}

}  // namespace kvlearn::internal

#if !defined(NDEBUG) || defined(KVLEARN_DCHECK_ALWAYS_ON)
#define KVLEARN_DCHECK(condition)                                                        \
  do {                                                                                   \
    if (!(condition)) ::kvlearn::internal::DcheckFailed(#condition, __FILE__, __LINE__); \
  } while (false)
#else
#define KVLEARN_DCHECK(condition) \
  do {                            \
  } while (false && (condition))
#endif
