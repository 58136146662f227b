// Coding-session workload (see CoderWorkloadOptions).
//
// What it models, from public descriptions of such traffic:
// - Coding agents open every request with a long fixed part (tool
//   definitions and a system prompt of some 15k tokens in public agent traces,
//   e.g. the Claude Code traces semianalysisai/cc-traces-weka-042026 on
//   Hugging Face: 12-13k tokens of tools and 3-7k of system prompt) shared by
//   every session on the same setup, then the session's own context.
// - An agent loop re-sends its whole context each turn with a little added
//   (those traces' prompts grow from ~16k to ~80k tokens over a session);
//   an edit rewrites a region near the end, so a turn shares all of the
//   previous prompt up to that region (the prefix constraint of KV reuse).
// - Sessions are long-lived and turns seconds apart (agent steps), unlike
//   chat's minute-long think times.
//
// Sessions are planned one at a time in arrival order, so the random stream is
// consumed in a fixed order; their requests are then sorted by time and
// numbered (PrefixTable, EmitPlanned). Each turn's prompt is a prefix of the
// table, so the next turn can keep any start of it: where the next turn
// diverges inside a piece another turn's prompt already extends, the piece is
// split there (PrefixTable::Split), before any id is handed out.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/generator_support.h"
#include "datasets/prefix_table.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

using generator::Millis;
using generator::MustBeAtLeastOne;
using generator::MustBeNonNegative;
using generator::MustBePositive;
using generator::Tokens;

constexpr double kRepositorySigma = 0.3;
constexpr double kGrowthSigma = 1.0;
constexpr double kOutputSigma = 0.75;

class CoderGenerator {
 public:
  explicit CoderGenerator(const CoderWorkloadOptions& o)
      : o_(o), rng_(o.seed), table_(o.block_size), picker_(o.repositories, o.repository_zipf) {
    // At most half the context, so a file context always fits.
    repositories_ = AddRootPrefixes(table_, rng_, o.repositories, o.repository_median_tokens,
                                    kRepositorySigma, o.max_input_tokens / 2);
  }

  Trace Run() {
    return PlanPoissonSessions(
        o_.requests, o_.block_size, o_.sessions_per_second, rng_, table_,
        absl::StrCat("coder(seed=", o_.seed, ", requests=", o_.requests, ")"),
        [this](int64_t start_ms, std::vector<PlannedRequest>& out) { PlanSession(start_ms, out); });
  }

 private:
  void PlanSession(int64_t start_ms, std::vector<PlannedRequest>& planned) {
    const uint32_t repository = repositories_[picker_.Sample(rng_)];
    const uint64_t repository_tokens = table_.Tokens(repository);
    const uint32_t turns = rng_.Geometric(o_.mean_turns);
    // The pieces of the last turn's prompt, shortest first: the repository,
    // then every point a later turn may come back to, then the whole prompt.
    std::vector<uint32_t> path = {repository};
    uint64_t input = repository_tokens +
                     Tokens(rng_.LogNormal(o_.file_context_median_tokens, o_.file_context_sigma), 1,
                            o_.max_input_tokens - repository_tokens);
    int64_t at_ms = start_ms;
    for (uint32_t t = 0; t < turns; ++t) {
      if (t > 0) {
        // Keep the previous prompt up to the edited region, never cutting
        // into the repository context.
        const uint64_t full = table_.Tokens(path.back()) / o_.block_size;
        const uint64_t edit = rng_.Geometric(o_.mean_edit_blocks);
        const uint64_t kept =
            std::max(repository_tokens, full > edit ? (full - edit) * o_.block_size : 0);
        const uint64_t grown =
            table_.Tokens(path.back()) +
            Tokens(rng_.LogNormal(o_.growth_median_tokens, kGrowthSigma), 1, o_.max_input_tokens);
        if (grown > o_.max_input_tokens) break;  // out of context: the session ends
        KeepUpTo(path, kept);
        input = grown;
      }
      path.push_back(table_.Add(path.back(), input));
      PlannedRequest p;
      p.at_ms = at_ms;
      p.seq = seq_++;
      p.prefix = path.back();
      p.input_tokens = static_cast<uint32_t>(input);
      p.output_tokens = static_cast<uint32_t>(
          Tokens(rng_.LogNormal(o_.output_median_tokens, kOutputSigma), 1, o_.max_input_tokens));
      planned.push_back(p);
      at_ms += Millis(rng_.Exponential(o_.mean_turn_gap_s));
    }
  }

  // Cuts `path` (pieces of increasing length) back to its first `tokens`
  // tokens, splitting the piece that reaches past them.
  // REQUIRES: Tokens(path.front()) <= tokens.
  void KeepUpTo(std::vector<uint32_t>& path, uint64_t tokens) {
    size_t keep = 1;  // pieces wholly within `tokens`
    while (keep < path.size() && table_.Tokens(path[keep]) <= tokens) ++keep;
    if (keep < path.size() && table_.Tokens(path[keep - 1]) < tokens) {
      path[keep] = table_.Split(path[keep], tokens);
      ++keep;
    }
    path.resize(keep);
  }

  const CoderWorkloadOptions o_;
  WorkloadRng rng_;
  PrefixTable table_;
  ZipfSampler picker_;
  std::vector<uint32_t> repositories_;
  uint64_t seq_ = 0;
};

}  // namespace

absl::Status ValidateCoderWorkloadOptions(const CoderWorkloadOptions& o) {
  const generator::OptionError bad{"coder workload"};
  if (auto s = generator::CheckBlockSize(bad, o.block_size); !s.ok()) return s;
  if (auto s = bad.FirstBroken({
          MustBePositive("requests", o.requests),
          MustBePositive("sessions_per_second", o.sessions_per_second),
          MustBeAtLeastOne("mean_turns", o.mean_turns),
          MustBeNonNegative("mean_turn_gap_s", o.mean_turn_gap_s),
          MustBePositive("repositories", o.repositories),
          MustBeNonNegative("repository_zipf", o.repository_zipf),
          MustBePositive("repository_median_tokens", o.repository_median_tokens),
          MustBePositive("file_context_median_tokens", o.file_context_median_tokens),
          MustBeNonNegative("file_context_sigma", o.file_context_sigma),
          MustBeAtLeastOne("mean_edit_blocks", o.mean_edit_blocks),
          MustBePositive("growth_median_tokens", o.growth_median_tokens),
          MustBePositive("output_median_tokens", o.output_median_tokens),
      });
      !s.ok()) {
    return s;
  }
  // Room for a repository token and a file-context token.
  return generator::CheckMaxInputTokens(bad, o.max_input_tokens, 2);
}

Trace GenerateCoderTrace(const CoderWorkloadOptions& options) {
  return CoderGenerator(options).Run();
}

}  // namespace kvlearn
