// Shifting workload (see ShiftWorkloadOptions): two mixes of chat, rag and
// coder traffic, one after the other. Traffic moves between kinds of use over
// a day and as products launch (the production study of Wang et al., "KVCache
// Cache in the Wild", USENIX ATC '25, sees reuse patterns differ by request
// category and the category mix differ between services); a cache policy tuned
// or trained on the first mix meets the second unprepared.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/generator_support.h"
#include "datasets/trace_merge.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

constexpr size_t kComponents = 3;  // chat, rag, coder, in ShiftComponent's order

std::array<double, kComponents> SharesOf(const TrafficShares& s) {
  return {s.chat, s.rag, s.coder};
}

// Splits `n` requests by the shares: each count within one of its exact share,
// the counts summing to `n`, a zero share getting none.
std::array<uint32_t, kComponents> SplitRequests(uint32_t n, const TrafficShares& shares) {
  const std::array<double, kComponents> s = SharesOf(shares);
  const double total = s[0] + s[1] + s[2];
  std::array<uint32_t, kComponents> counts{};
  double cumulative = 0;
  int64_t given = 0;
  for (size_t k = 0; k < kComponents; ++k) {
    cumulative += s[k];
    const int64_t upto = std::llround(n * (cumulative / total));
    counts[k] = static_cast<uint32_t>(upto - given);
    given = upto;
  }
  return counts;
}

// One phase: its components generated apart (seed streams first_stream,
// first_stream + 1, ...) and merged by arrival time; `kinds` gets each
// request's component.
Trace Phase(const ShiftWorkloadOptions& o, uint32_t requests, const TrafficShares& shares,
            uint64_t first_stream, std::vector<ShiftComponent>& kinds) {
  const std::array<uint32_t, kComponents> counts = SplitRequests(requests, shares);
  std::vector<Trace> parts;
  std::vector<ShiftComponent> part_kind;
  const auto add = [&](auto options, ShiftComponent kind, auto generate) {
    const size_t k = static_cast<size_t>(kind);
    if (counts[k] == 0) return;
    options.seed = generator::ComponentSeed(o.seed, first_stream + k);
    options.requests = counts[k];
    options.block_size = o.block_size;
    parts.push_back(generate(options));
    part_kind.push_back(kind);
  };
  add(o.chat, ShiftComponent::kChat, GenerateChatTrace);
  add(o.rag, ShiftComponent::kRag, GenerateRagTrace);
  add(o.coder, ShiftComponent::kCoder, GenerateCoderTrace);
  std::vector<uint32_t> part_of;
  Trace merged = MergeTraces(parts, o.block_size, "", &part_of);
  kinds.clear();
  for (const uint32_t p : part_of) kinds.push_back(part_kind[p]);
  return merged;
}

}  // namespace

absl::Status ValidateShiftWorkloadOptions(const ShiftWorkloadOptions& o) {
  const generator::OptionError bad{"shift workload"};
  if (o.requests == 0) return bad("requests", o.requests, "> 0");
  if (!(o.shift_at >= 0 && o.shift_at <= 1)) return bad("shift_at", o.shift_at, "in [0, 1]");
  for (const auto& [phase, shares] : {std::pair{"before", o.before}, std::pair{"after", o.after}}) {
    for (const auto& [name, share] : {std::pair{"chat", shares.chat}, std::pair{"rag", shares.rag},
                                      std::pair{"coder", shares.coder}}) {
      if (!generator::NonNegative(share)) {
        return bad(absl::StrCat(phase, ".", name, " share"), share, ">= 0");
      }
    }
    if (!(shares.chat + shares.rag + shares.coder > 0)) {
      return bad(absl::StrCat("the sum of the ", phase, " shares"),
                 shares.chat + shares.rag + shares.coder, "> 0");
    }
  }
  ShiftWorkloadOptions copy = o;
  copy.chat.block_size = copy.rag.block_size = copy.coder.block_size = o.block_size;
  copy.rag.requests = copy.coder.requests = 1;
  if (auto s = ValidateChatWorkloadOptions(copy.chat); !s.ok()) return s;
  if (auto s = ValidateRagWorkloadOptions(copy.rag); !s.ok()) return s;
  return ValidateCoderWorkloadOptions(copy.coder);
}

Trace GenerateShiftTrace(const ShiftWorkloadOptions& o, std::vector<ShiftComponent>* components) {
  const uint32_t before = static_cast<uint32_t>(std::llround(o.requests * o.shift_at));
  std::vector<Trace> phases;
  std::vector<std::vector<ShiftComponent>> kinds(2);
  if (before > 0) phases.push_back(Phase(o, before, o.before, 1, kinds[0]));
  if (o.requests > before) {
    Trace second = Phase(o, o.requests - before, o.after, 1 + kComponents, kinds[1]);
    // The second mix starts where the first ends.
    const int64_t start_ms = phases.empty() ? 0 : phases[0].requests.back().timestamp_ms;
    for (TraceRequest& r : second.requests) r.timestamp_ms += start_ms;
    phases.push_back(std::move(second));
  }
  std::vector<uint32_t> phase_of;
  Trace trace = MergeTraces(
      phases, o.block_size,
      absl::StrCat("shift(seed=", o.seed, ", requests=", o.requests, ", at=", o.shift_at, ")"),
      &phase_of);
  if (components != nullptr) {
    components->clear();
    std::array<size_t, 2> next{};
    // Phases are indexed as pushed: a trace with no first phase has its second at 0.
    const size_t first_kinds = before > 0 ? 0 : 1;
    for (const uint32_t p : phase_of) {
      const std::vector<ShiftComponent>& k = kinds[first_kinds + p];
      components->push_back(k[next[p]++]);
    }
  }
  return trace;
}

}  // namespace kvlearn
