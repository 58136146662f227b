// Synthetic workload generators. Each kind of traffic (chat, agent fan-out,
// batch extraction, a mix of the three) has an options struct and a
// Generate<Kind>Trace function here, implemented in its own <kind>_workload.cc.
//
// A generator is a pure function of its options: the same options, seed
// included, give the same Trace on every platform and standard library. That is
// why sampling goes through WorkloadRng below (std::mt19937_64, whose output the
// standard fixes, plus hand-written inverse-CDF / Box-Muller transforms) and
// never through std::*_distribution, whose algorithms differ between libraries.
//
// Generated traces satisfy everything the Mooncake reader checks: timestamps in
// milliseconds, non-decreasing; ceil(input_length / block_size) ids per request;
// no id repeated within a request; and every id always follows the same parent,
// so an id stands for one prefix across the whole trace.
//
// Thread-safety: generators share no state; call them from any thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "datasets/trace.h"

namespace kvlearn {

// Multi-turn chat: conversations arrive as a Poisson process; each opens with
// one of a few shared system prompts (Zipf popularity) and runs a geometric
// number of turns separated by think time. Every turn re-sends the whole
// history, so it shares the previous turn's full blocks and continues with fresh
// ids. Defaults resemble the Mooncake conversation trace (mean prompt ~8-9k
// tokens, mean reply ~350 tokens, ~3 requests/s).
struct ChatWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;  // requests in the trace (the trace stops mid-conversation)
  uint32_t block_size = 512;  // tokens per block

  double sessions_per_second = 1.5;  // arrival rate of new conversations
  double mean_turns = 2.0;           // user turns per conversation, geometric, >= 1
  double mean_think_time_s = 60.0;   // seconds between a conversation's turns, exponential

  uint32_t system_prompts = 8;                  // distinct shared system prompts
  double system_prompt_zipf = 1.0;              // prompt k (1-based) has weight 1 / k^zipf
  double system_prompt_median_tokens = 2048;    // log-normal, sigma 0.5
  double first_message_median_tokens = 3000;    // first user message (often a pasted document)
  double followup_message_median_tokens = 400;  // later user messages
  double message_sigma = 1.0;                   // log-normal sigma of user messages
  double output_median_tokens = 270;            // model reply, log-normal
  double output_sigma = 0.75;
  uint32_t max_input_tokens = 131072;  // context window: a conversation ends before exceeding it
};

// OK when `options` can be generated from; otherwise names the bad field.
absl::Status ValidateChatWorkloadOptions(const ChatWorkloadOptions& options);

// REQUIRES: ValidateChatWorkloadOptions(options).ok().
// Returns options.requests requests, or fewer if the trace would hold more than
// 2^32 block ids (Trace's offset limit). About a second per million requests.
Trace GenerateChatTrace(const ChatWorkloadOptions& options);

// Agent fan-out: agents arrive as a Poisson process; each opens with one of a
// few shared system prompts (tool definitions, Zipf popularity) and a long task
// context of its own, then forks sub-agents a geometric number of rounds.
// In a round, W sub-agents (geometric, mean `mean_fanout`) arrive uniformly
// within `fork_window_s` of the fork, each sending the agent's whole context
// plus a short sub-task of its own; the next round's context adds the
// sub-agents' results. All sub-agents of a round share one long prefix and
// arrive within seconds: the burst that prefix replication is for.
struct FanoutWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;

  // Rates are set so the default traffic keeps 4 A100 prefill nodes busy
  // about 40% of the time on average, queueing only in bursts.
  double agents_per_second = 0.05;  // arrival rate of agents
  double mean_fanout = 16;          // sub-agents per round, geometric, >= 1
  double fork_window_s = 2.0;       // a round's sub-agents arrive uniformly within this window
  double mean_rounds = 2.0;         // rounds per agent, geometric, >= 1
  double mean_round_gap_s = 20.0;   // seconds between an agent's rounds, exponential

  uint32_t system_prompts = 4;
  double system_prompt_zipf = 1.0;
  double system_prompt_median_tokens = 4096;  // log-normal, sigma 0.3
  double context_median_tokens = 12000;       // the agent's task context, log-normal
  double context_sigma = 0.5;
  double subtask_median_tokens = 1000;  // per sub-agent, log-normal
  double subtask_sigma = 0.8;
  double result_median_tokens = 1500;  // added to the context per round, log-normal, sigma 0.5
  double output_median_tokens = 400;   // log-normal, sigma 0.75
  uint32_t max_input_tokens = 131072;
};
absl::Status ValidateFanoutWorkloadOptions(const FanoutWorkloadOptions& options);
// REQUIRES: ValidateFanoutWorkloadOptions(options).ok(). Same size rule as chat.
Trace GenerateFanoutTrace(const FanoutWorkloadOptions& options);

// Batch extraction / labelling jobs: jobs arrive as a Poisson process; each
// uses one instruction prefix (picked from a few templates by Zipf popularity,
// so popular instructions recur across jobs) and sends a geometric number of
// requests, each the instruction plus a fresh document, at a dense Poisson
// rate: a burst of same-prefix requests with a fresh tail each.
struct BatchWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;

  // Defaults: ~1.6 requests/s on average (about 25% of 4 A100 prefill
  // nodes), 20/s while a job runs.
  double jobs_per_second = 0.05;            // arrival rate of jobs
  double mean_documents = 32;               // requests per job, geometric, >= 1
  double job_requests_per_second = 20;      // arrival rate within a job
  uint32_t instructions = 32;               // distinct instruction templates
  double instruction_zipf = 1.0;            // template k (1-based) has weight 1 / k^zipf
  double instruction_median_tokens = 6000;  // log-normal, sigma 0.3
  double document_median_tokens = 3000;     // log-normal
  double document_sigma = 0.6;
  double output_median_tokens = 200;  // log-normal, sigma 0.5
  uint32_t max_input_tokens = 131072;
};
absl::Status ValidateBatchWorkloadOptions(const BatchWorkloadOptions& options);
// REQUIRES: ValidateBatchWorkloadOptions(options).ok(). Same size rule as chat.
Trace GenerateBatchTrace(const BatchWorkloadOptions& options);

// A mix of the three kinds on one cluster: each component is generated with
// its share of the requests (and a seed derived from `seed`), its ids moved to
// a range of their own, and the three merged by arrival time. The components'
// own `seed`, `requests` and `block_size` are overridden.
struct MixedWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;
  double chat_share = 0.5;
  double fanout_share = 0.25;
  double batch_share = 0.25;
  ChatWorkloadOptions chat;
  FanoutWorkloadOptions fanout;
  BatchWorkloadOptions batch;
};
absl::Status ValidateMixedWorkloadOptions(const MixedWorkloadOptions& options);
// REQUIRES: ValidateMixedWorkloadOptions(options).ok().
Trace GenerateMixedTrace(const MixedWorkloadOptions& options);

// Deterministic sampling shared by the generators.
class WorkloadRng {
 public:
  explicit WorkloadRng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Exponential with the given mean (inverse CDF).
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal by Box-Muller. The second value of the pair is dropped so
  // every draw consumes exactly two engine outputs.
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log stays finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Log-normal with the given median (= exp(mu)) and sigma.
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  // Geometric on {1, 2, ...} with the given mean (>= 1), by inverse CDF.
  uint32_t Geometric(double mean) {
    if (mean <= 1.0) return 1;
    const double stop = 1.0 / mean;  // chance that each draw is the last
    const double extra = std::floor(std::log1p(-Uniform()) / std::log1p(-stop));
    return 1 + static_cast<uint32_t>(std::min(extra, 1e9));
  }

 private:
  std::mt19937_64 engine_;
};

// Draws index k in [0, n) with probability proportional to 1 / (k + 1)^exponent.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1.
  ZipfSampler(uint32_t n, double exponent) : cumulative_(n) {
    double total = 0;
    for (uint32_t k = 0; k < n; ++k) {
      total += std::pow(static_cast<double>(k + 1), -exponent);
      cumulative_[k] = total;
    }
    for (double& c : cumulative_) c /= total;
  }
  uint32_t Sample(WorkloadRng& rng) const {
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), rng.Uniform());
    return static_cast<uint32_t>(
        std::min<size_t>(it - cumulative_.begin(), cumulative_.size() - 1));
  }

 private:
  std::vector<double> cumulative_;
};

}  // namespace kvlearn
