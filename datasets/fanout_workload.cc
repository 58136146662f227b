// Agent fan-out workload (see FanoutWorkloadOptions).
//
// Agents are planned one at a time in arrival order, so the random stream is
// consumed in a fixed order; their requests are then sorted by time and
// numbered (PrefixTable, EmitPlanned). Planning stops once no agent still to
// come could arrive before the last request kept.

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

constexpr double kSystemPromptSigma = 0.3;
constexpr double kResultSigma = 0.5;
constexpr double kOutputSigma = 0.75;

class FanoutGenerator {
 public:
  explicit FanoutGenerator(const FanoutWorkloadOptions& o)
      : o_(o),
        rng_(o.seed),
        table_(o.block_size),
        prompt_picker_(o.system_prompts, o.system_prompt_zipf) {
    // Prefixes leave room for at least one sub-task token.
    max_prefix_ = o.max_input_tokens - 1;
    prompts_ = AddRootPrefixes(table_, rng_, o.system_prompts, o.system_prompt_median_tokens,
                               kSystemPromptSigma, o.max_input_tokens / 2);
  }

  Trace Run() {
    return PlanPoissonSessions(
        o_.requests, o_.block_size, o_.agents_per_second, rng_, table_,
        absl::StrCat("fanout(seed=", o_.seed, ", requests=", o_.requests, ")"),
        [this](int64_t start_ms, std::vector<PlannedRequest>& out) { PlanAgent(start_ms, out); });
  }

 private:
  void PlanAgent(int64_t start_ms, std::vector<PlannedRequest>& planned) {
    const uint32_t system = prompts_[prompt_picker_.Sample(rng_)];
    uint64_t context =
        table_.Tokens(system) +
        Tokens(rng_.LogNormal(o_.context_median_tokens, o_.context_sigma), 1, o_.max_input_tokens);
    uint32_t prefix = table_.Add(system, std::min(context, max_prefix_));
    const uint32_t rounds = rng_.Geometric(o_.mean_rounds);
    int64_t fork_ms = start_ms;
    for (uint32_t round = 0; round < rounds; ++round) {
      const uint64_t prefix_tokens = table_.Tokens(prefix);
      const uint32_t width = rng_.Geometric(o_.mean_fanout);
      for (uint32_t w = 0; w < width; ++w) {
        PlannedRequest p;
        p.at_ms = fork_ms + Millis(rng_.Uniform() * o_.fork_window_s);
        p.seq = seq_++;
        p.prefix = prefix;
        p.input_tokens = static_cast<uint32_t>(
            prefix_tokens + Tokens(rng_.LogNormal(o_.subtask_median_tokens, o_.subtask_sigma), 1,
                                   o_.max_input_tokens - prefix_tokens));
        p.output_tokens = static_cast<uint32_t>(
            Tokens(rng_.LogNormal(o_.output_median_tokens, kOutputSigma), 1, o_.max_input_tokens));
        planned.push_back(p);
      }
      // The next round's context adds what the sub-agents reported.
      const uint64_t grown =
          prefix_tokens +
          Tokens(rng_.LogNormal(o_.result_median_tokens, kResultSigma), 1, o_.max_input_tokens);
      if (grown > max_prefix_) break;  // out of context: the agent stops
      prefix = table_.Add(prefix, grown);
      fork_ms += Millis(o_.fork_window_s + rng_.Exponential(o_.mean_round_gap_s));
    }
  }

  const FanoutWorkloadOptions o_;
  WorkloadRng rng_;
  PrefixTable table_;
  ZipfSampler prompt_picker_;
  std::vector<uint32_t> prompts_;
  uint64_t max_prefix_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace

absl::Status ValidateFanoutWorkloadOptions(const FanoutWorkloadOptions& o) {
  const generator::OptionError bad{"fanout workload"};
  if (auto s = generator::CheckBlockSize(bad, o.block_size); !s.ok()) return s;
  if (auto s = bad.FirstBroken({
          MustBePositive("requests", o.requests),
          MustBePositive("agents_per_second", o.agents_per_second),
          MustBeAtLeastOne("mean_fanout", o.mean_fanout),
          MustBeNonNegative("fork_window_s", o.fork_window_s),
          MustBeAtLeastOne("mean_rounds", o.mean_rounds),
          MustBeNonNegative("mean_round_gap_s", o.mean_round_gap_s),
          MustBePositive("system_prompts", o.system_prompts),
          MustBeNonNegative("system_prompt_zipf", o.system_prompt_zipf),
          MustBePositive("system_prompt_median_tokens", o.system_prompt_median_tokens),
          MustBePositive("context_median_tokens", o.context_median_tokens),
          MustBeNonNegative("context_sigma", o.context_sigma),
          MustBePositive("subtask_median_tokens", o.subtask_median_tokens),
          MustBeNonNegative("subtask_sigma", o.subtask_sigma),
          MustBePositive("result_median_tokens", o.result_median_tokens),
          MustBePositive("output_median_tokens", o.output_median_tokens),
      });
      !s.ok()) {
    return s;
  }
  // Room for a system prompt token, a context token and a sub-task token.
  return generator::CheckMaxInputTokens(bad, o.max_input_tokens, 4);
}

Trace GenerateFanoutTrace(const FanoutWorkloadOptions& options) {
  return FanoutGenerator(options).Run();
}

}  // namespace kvlearn
