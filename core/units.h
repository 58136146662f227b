// Unit conversions used across the project, each in one place. Conventions:
// time in ms inside the simulator, us on the wire, seconds in reports; a GB
// is 1e9 bytes (link and memory figures are quoted that way by vendors).
#pragma once

#include <cstdint>

namespace kvlearn {

// A link of `gb_per_s` GB/s moves this many bytes per ms (1 GB/s = 1e6 B/ms).
constexpr double BytesPerMs(double gb_per_s) { return gb_per_s * 1e6; }
// GB (1e9 bytes) to bytes.
constexpr double GbToBytes(double gb) { return gb * 1e9; }
constexpr double MsToSeconds(double ms) { return ms / 1e3; }
constexpr int64_t UsToMs(int64_t us) { return us / 1000; }

}  // namespace kvlearn
