// Small text helpers for the JSON and CSV reports (comparison_report,
// cluster_report): a quoted JSON string, a number that reads back as the same
// double, and bytes as GB (1e9).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace kvlearn {

inline std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += absl::StrFormat("\\u%04x", ch);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Shortest text that reads back as the same double.
inline std::string JsonNumber(double v) { return absl::StrFormat("%.17g", v); }

inline double Gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

}  // namespace kvlearn
