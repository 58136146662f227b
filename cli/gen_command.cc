// `kvlearn gen`: writes a synthetic trace in Mooncake JSONL, so policies can be
// compared on traffic shapes the shipped trace does not have.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/command.h"
#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

// Workload kinds `--kind` accepts; each has a Generate<Kind>Trace function.
const std::vector<std::string> kKinds = {"chat"};

struct GenFlags {
  std::string kind = "chat";
  std::string out;
  ChatWorkloadOptions chat;
};

// Distinct ids; generated ids are dense from 0, so a bitmap is usually enough.
uint64_t CountDistinctBlocks(const Trace& trace) {
  if (trace.hash_ids.empty()) return 0;
  const uint64_t max_id = *std::max_element(trace.hash_ids.begin(), trace.hash_ids.end());
  if (max_id < 4 * trace.hash_ids.size() + 1024) {
    std::vector<bool> seen(max_id + 1);
    uint64_t distinct = 0;
    for (uint64_t id : trace.hash_ids) {
      if (!seen[id]) {
        seen[id] = true;
        ++distinct;
      }
    }
    return distinct;
  }
  std::vector<uint64_t> ids = trace.hash_ids;
  std::sort(ids.begin(), ids.end());
  return std::unique(ids.begin(), ids.end()) - ids.begin();
}

int Fail(const absl::Status& status) {
  std::cerr << "kvlearn gen: " << status.message() << "\n";
  return 1;
}

int RunGen(const GenFlags& f) {
  // Only chat exists so far; other kinds dispatch here as they are added.
  if (auto s = ValidateChatWorkloadOptions(f.chat); !s.ok()) return Fail(s);
  const Trace trace = GenerateChatTrace(f.chat);
  if (trace.requests.size() < f.chat.requests) {
    std::cerr << "kvlearn gen: stopped at " << trace.requests.size()
              << " requests: a trace holds at most 2^32 block ids\n";
  }
  if (auto s = WriteMooncakeTrace(trace, f.out); !s.ok()) return Fail(s);
  std::cout << "wrote " << trace.requests.size() << " requests (" << trace.hash_ids.size()
            << " block accesses, " << CountDistinctBlocks(trace) << " distinct blocks) to " << f.out
            << "\n";
  return 0;
}

}  // namespace

Command AddGenCommand(CLI::App& root) {
  auto flags = std::make_shared<GenFlags>();
  ChatWorkloadOptions& chat = flags->chat;
  CLI::App* cmd = root.add_subcommand("gen", "Generate a synthetic trace in Mooncake JSONL");
  cmd->add_option("--kind", flags->kind, "workload kind")
      ->capture_default_str()
      ->check(CLI::IsMember(kKinds));
  cmd->add_option("--requests", chat.requests, "number of requests to generate")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  cmd->add_option("--seed", chat.seed, "random seed; the same seed gives the same trace")
      ->capture_default_str();
  cmd->add_option("--block-size", chat.block_size, "tokens per block")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--out", flags->out, "output file (Mooncake JSONL)")->required();

  // Chat knobs; ValidateChatWorkloadOptions checks their ranges.
  cmd->add_option("--sessions-per-second", chat.sessions_per_second,
                  "chat: new conversations per second (Poisson arrivals)")
      ->capture_default_str();
  cmd->add_option("--mean-turns", chat.mean_turns,
                  "chat: mean user turns per conversation (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--think-time", chat.mean_think_time_s,
                  "chat: mean seconds between turns of a conversation (exponential)")
      ->capture_default_str();
  cmd->add_option("--system-prompts", chat.system_prompts,
                  "chat: number of distinct shared system prompts")
      ->capture_default_str();
  cmd->add_option("--system-prompt-zipf", chat.system_prompt_zipf,
                  "chat: popularity exponent s (unitless): prompt k has weight 1/k^s")
      ->capture_default_str();
  cmd->add_option("--system-prompt-tokens", chat.system_prompt_median_tokens,
                  "chat: median system prompt length in tokens (log-normal, sigma 0.5)")
      ->capture_default_str();
  cmd->add_option("--first-message-tokens", chat.first_message_median_tokens,
                  "chat: median first user message in tokens (log-normal)")
      ->capture_default_str();
  cmd->add_option("--followup-message-tokens", chat.followup_message_median_tokens,
                  "chat: median later user message in tokens (log-normal)")
      ->capture_default_str();
  cmd->add_option("--message-sigma", chat.message_sigma,
                  "chat: log-normal sigma of user message lengths (natural-log units)")
      ->capture_default_str();
  cmd->add_option("--output-tokens", chat.output_median_tokens,
                  "chat: median reply length in tokens (log-normal)")
      ->capture_default_str();
  cmd->add_option("--output-sigma", chat.output_sigma,
                  "chat: log-normal sigma of reply lengths (natural-log units)")
      ->capture_default_str();
  cmd->add_option("--max-input-tokens", chat.max_input_tokens,
                  "chat: context window in tokens; a conversation ends before exceeding it")
      ->capture_default_str();
  return {cmd, [flags] { return RunGen(*flags); }};
}

}  // namespace kvlearn
