// Research switches that turn parts of the learned policy off, one at a
// time, to measure what each part is worth on the robustness grid
// (docs/learned_policy.md, "What each part is worth"). Set by the
// environment variable KVLEARN_LEARNED_ABLATE=part[,part], read where the
// policy is made (CreatePolicy); never for serving.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvlearn {

// The parts a switch turns off. Each names what replaces it when off.
enum class LearnedPart : uint8_t {
  kGdsfExpert,     // learned follows lru (and the model expert) only
  kFallback,       // the model expert leaves the lead only by the switching rule
  kSpacePrice,     // d = 0: admitting is priced by its transfer alone
  kCalibration,    // the model's claims are used as given
  kLedger,         // every refusal G <= 0 is placed, without the bets
  kCurveEviction,  // the model expert evicts the least recent leaf
  kGuard,          // the model evicts by V whatever the guard and recency shadow say
  kArcExpert,      // no ARC expert (nor its shadow) in the model expert
  kServedShares,   // P(E) is F(E), whatever nodes in front served
  kCount,
};

// The environment variable the switches are read from.
inline constexpr std::string_view kLearnedAblateVariable = "KVLEARN_LEARNED_ABLATE";

class LearnedAblation {
 public:
  bool Off(LearnedPart part) const { return (bits_ >> static_cast<unsigned>(part)) & 1u; }
  void TurnOff(LearnedPart part) { bits_ |= 1u << static_cast<unsigned>(part); }
  bool None() const { return bits_ == 0; }
  LearnedAblation& operator|=(const LearnedAblation& other) {
    bits_ |= other.bits_;
    return *this;
  }

 private:
  uint32_t bits_ = 0;
};

// The slug of each part ("gdsf-expert", ...), as the variable names it.
std::string_view LearnedPartName(LearnedPart part);
// "gdsf-expert, fallback, ..." for messages.
std::string JoinedLearnedPartNames();
// Parses a comma-separated list of slugs (empty: nothing off); an unknown
// slug is InvalidArgument naming the known ones.
absl::StatusOr<LearnedAblation> ParseLearnedAblation(std::string_view list);
// The switches KVLEARN_LEARNED_ABLATE sets (none when unset).
absl::StatusOr<LearnedAblation> LearnedAblationFromEnvironment();

}  // namespace kvlearn
