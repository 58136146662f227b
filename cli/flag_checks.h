// Checks for numeric flags. CLI::Range lets "nan" through (both of its
// comparisons are false for NaN), and a NaN share or size then turns into a
// garbage byte count in a cast; FiniteRange refuses it, and inf, at parse
// time, with the flag's name in the message as CLI11 prints it.
#pragma once

#include <cmath>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvlearn {

// A finite number in [lo, hi].
inline CLI::Validator FiniteRange(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v < lo || v > hi) {
          return absl::StrCat("Value ", text, " is not a finite number in [", lo, ", ", hi, "]");
        }
        return "";
      },
      absl::StrCat("FLOAT in [", lo, ", ", hi, "]"));
}

}  // namespace kvlearn
