// Small pieces every synthetic generator uses (chat, fan-out, batch, rag,
// coder, and the mixes): turning a sampled real number into a token count or
// a millisecond timestamp, a mix component's seed, and the checks and error
// text of their options. Internal to datasets/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvlearn::generator {

// x rounded and clamped to [lo, hi]; NaN gives lo.
inline uint64_t Tokens(double x, uint64_t lo, uint64_t hi) {
  const double r = std::round(x);
  if (!(r >= static_cast<double>(lo))) return lo;  // also catches NaN
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<uint64_t>(r);
}

// Clamped so absurd rates cannot overflow the clock (1e15 ms is ~30,000 years).
inline int64_t Millis(double seconds) { return std::llround(std::min(seconds * 1000.0, 1e15)); }

// The seed of a mix's component number `stream` (1, 2, ...): distinct, fixed
// functions of the mix's seed, so each component draws a stream of its own.
inline uint64_t ComponentSeed(uint64_t seed, uint64_t stream) {
  return seed + stream * 0x9E3779B97F4A7C15ull;
}

inline bool Positive(double x) { return std::isfinite(x) && x > 0; }
inline bool NonNegative(double x) { return std::isfinite(x) && x >= 0; }

// One option checked against one rule: `holds` says whether `value` obeys it.
struct OptionRule {
  std::string_view field;
  double value;  // exact for the integer options, whose only failing value is 0
  bool holds;
  std::string_view rule;
};
inline OptionRule MustBePositive(std::string_view field, double v) {
  return {field, v, Positive(v), "> 0"};
}
inline OptionRule MustBeNonNegative(std::string_view field, double v) {
  return {field, v, NonNegative(v), ">= 0"};
}
inline OptionRule MustBeAtLeastOne(std::string_view field, double v) {
  return {field, v, std::isfinite(v) && v >= 1, ">= 1"};
}

// Builds "<workload>: <field> must be <rule>, got <value>" errors.
struct OptionError {
  std::string_view workload;  // e.g. "batch workload"
  template <typename T>
  absl::Status operator()(std::string_view field, const T& value, std::string_view rule) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(workload), ": ", std::string(field),
                                                   " must be ", std::string(rule), ", got ",
                                                   value));
  }
  // The error for the first rule, in order, that does not hold; OK if all do.
  absl::Status FirstBroken(std::initializer_list<OptionRule> rules) const {
    for (const OptionRule& r : rules) {
      if (!r.holds) return (*this)(r.field, r.value, r.rule);
    }
    return absl::OkStatus();
  }
};

// The limits every generator puts on its block size and prompt length.
// `least_input_tokens` is the shortest prompt that holds one token of each
// part the generator builds a prompt from; the upper bound keeps sums of
// history far from uint32 overflow.
inline absl::Status CheckBlockSize(const OptionError& bad, uint32_t block_size) {
  if (block_size == 0 || block_size > (1u << 20)) {
    return bad("block_size", block_size, "in [1, 2^20]");
  }
  return absl::OkStatus();
}
inline absl::Status CheckMaxInputTokens(const OptionError& bad, uint32_t max_input_tokens,
                                        uint32_t least_input_tokens) {
  if (max_input_tokens < least_input_tokens || max_input_tokens > (1u << 30)) {
    return bad("max_input_tokens", max_input_tokens,
               absl::StrCat("in [", least_input_tokens, ", 2^30]"));
  }
  return absl::OkStatus();
}

}  // namespace kvlearn::generator
