// Protobuf-style base-128 varints for the sidecar's own RocksDB records (the
// event log's entries and decision journal, model-swap records, snapshots)
// and for policy state (core/policy_state.h): 7 bits per byte, low group
// first, high bit set on every byte but the last.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlearn {

inline void PutVarint(std::string& out, uint64_t n) {
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
}

// Reads a varint at the front of `in` and drops it; false if malformed.
inline bool GetVarint(std::string_view& in, uint64_t& n) {
  n = 0;
  for (size_t i = 0; i < in.size() && i < 10; ++i) {
    const auto b = static_cast<unsigned char>(in[i]);
    n |= uint64_t{b & 0x7fu} << (7 * i);
    if (b < 0x80) {
      in.remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

}  // namespace kvlearn
