// Synthetic workload generators. Each kind of traffic (chat, agent fan-out,
// batch extraction, a mix of the three, retrieval-augmented generation, coding
// sessions, and a mix that shifts partway through) has an options struct and a
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

// Retrieval-augmented generation: a request is an application's system
// prompt, one or more long documents retrieved from a corpus, and a short
// question. Queries come in bursts (many users asking about one topic within
// seconds); a burst's requests retrieve the same documents in the same order.
// Bursts arrive as a Poisson process; each picks a system prompt (Zipf over
// `system_prompts`) and a geometric number of distinct documents, each by
// Zipf popularity over the corpus, so popular documents recur across bursts.
// The chain is system prompt, then the documents in retrieval order, then the
// question: requests share a prefix as far as their document lists agree.
// Defaults give about 30 blocks of 512 tokens per request on average, like
// the production long-prompt traffic this kind stands for.
struct RagWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;

  double bursts_per_second = 0.5;             // arrival rate of bursts (Poisson)
  double mean_burst_requests = 4;             // requests per burst, geometric, >= 1
  double mean_burst_gap_s = 2.0;              // seconds between a burst's requests, exponential
  uint32_t system_prompts = 4;                // distinct system prompts (applications)
  double system_prompt_zipf = 1.0;            // prompt k (1-based) has weight 1 / k^zipf
  double system_prompt_median_tokens = 1500;  // log-normal, sigma 0.5
  uint32_t documents = 2000;                  // corpus size
  double document_zipf = 1.0;                 // document k has weight 1 / k^zipf
  double document_median_tokens = 6000;       // log-normal, drawn once per document
  double document_sigma = 0.5;
  double mean_documents = 2;            // documents per request, geometric, >= 1 (at most 16)
  double question_median_tokens = 100;  // log-normal, sigma 0.8, fresh per request
  double output_median_tokens = 250;    // log-normal, sigma 0.75
  uint32_t max_input_tokens = 131072;   // documents that would not fit are left out
};
absl::Status ValidateRagWorkloadOptions(const RagWorkloadOptions& options);
// REQUIRES: ValidateRagWorkloadOptions(options).ok(). Same size rule as chat.
Trace GenerateRagTrace(const RagWorkloadOptions& options);

// Coding assistant / coding agent: sessions arrive as a Poisson process; each
// works in one repository (Zipf popularity over `repositories`) whose long
// context (tool definitions, system prompt, repository map) every session on
// it sends first, followed by a file context of its own. Each later turn
// re-sends the previous prompt up to a point a few blocks before its end
// (the edited region: `mean_edit_blocks` full blocks, geometric, never into
// the repository context), then the rewritten region and what the turn adds
// (`growth` tokens). So consecutive turns share all but their last few blocks
// and the prompt grows slowly; a session ends after a geometric number of
// turns or before exceeding the context window.
struct CoderWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;

  double sessions_per_second = 0.15;         // arrival rate of sessions (Poisson)
  double mean_turns = 8;                     // turns per session, geometric, >= 1
  double mean_turn_gap_s = 15;               // seconds between a session's turns, exponential
  uint32_t repositories = 16;                // distinct repository contexts
  double repository_zipf = 1.0;              // repository k has weight 1 / k^zipf
  double repository_median_tokens = 16000;   // log-normal, sigma 0.3
  double file_context_median_tokens = 8000;  // first turn's own context, log-normal
  double file_context_sigma = 0.7;
  double mean_edit_blocks = 2;         // full blocks re-written per turn, geometric, >= 1
  double growth_median_tokens = 400;   // tokens a turn adds, log-normal, sigma 1
  double output_median_tokens = 300;   // log-normal, sigma 0.75
  uint32_t max_input_tokens = 131072;  // a session ends before exceeding it
};
absl::Status ValidateCoderWorkloadOptions(const CoderWorkloadOptions& options);
// REQUIRES: ValidateCoderWorkloadOptions(options).ok(). Same size rule as chat.
Trace GenerateCoderTrace(const CoderWorkloadOptions& options);

// Traffic whose mix changes partway through: the first `shift_at` of the
// requests are a mix of chat, rag and coder traffic in the `before` shares,
// the rest a mix in the `after` shares (each mix as `mixed` builds one: every
// component generated apart with its share of the phase's requests and a
// seed of its own, merged by arrival time). The second phase starts when the
// first ends and shares no block with it: its users and documents are new.
// The default puts the last 20% of the requests after the shift, so a model
// trained on the first 60% and judged on the last 20% meets traffic it never saw.
struct TrafficShares {
  double chat = 0;
  double rag = 0;
  double coder = 0;
};
struct ShiftWorkloadOptions {
  uint64_t seed = 1;
  uint32_t requests = 10000;
  uint32_t block_size = 512;
  double shift_at = 0.8;  // share of the requests before the shift, in [0, 1]
  TrafficShares before = {.chat = 0.7, .rag = 0.15, .coder = 0.15};
  TrafficShares after = {.chat = 0.2, .rag = 0.4, .coder = 0.4};
  ChatWorkloadOptions chat;
  RagWorkloadOptions rag;
  CoderWorkloadOptions coder;
};
// Which component of a shift trace a request came from.
enum class ShiftComponent : uint8_t { kChat, kRag, kCoder };
absl::Status ValidateShiftWorkloadOptions(const ShiftWorkloadOptions& options);
// REQUIRES: ValidateShiftWorkloadOptions(options).ok(). When `components` is
// not null it receives, per request of the trace, the component it came from.
Trace GenerateShiftTrace(const ShiftWorkloadOptions& options,
                         std::vector<ShiftComponent>* components = nullptr);

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
