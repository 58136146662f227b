// splitmix64 (Steele, Lea, Flood, OOPSLA '14): a fixed, portable stream of
// 64-bit values from a 64-bit state. Used wherever a result must not depend on
// the standard library's distributions (std:: ones differ between versions).
#pragma once

#include <cstdint>

namespace kvlearn {

// splitmix64's finalizer alone: spreads every bit of `z` over the result
// (a hash of a hash, as server/replica_group.cc uses it).
inline uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Advances `state` and returns the next value of its stream.
inline uint64_t SplitMix64(uint64_t& state) {
  return SplitMix64Mix(state += 0x9e3779b97f4a7c15ULL);
}

// Uniform in [0, 1) from the top 53 bits of the next value.
inline double SplitMix64Uniform(uint64_t& state) {
  return static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace kvlearn
