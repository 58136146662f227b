// `kvlearn gen`: writes a synthetic trace in Mooncake's or Bailian's JSONL, so
// policies can be compared on traffic shapes the shipped trace does not have.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/command.h"
#include "datasets/mooncake_reader.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

// Workload kinds `--kind` accepts; each has a Generate<Kind>Trace function.
const std::vector<std::string> kKinds = {"chat", "fanout", "batch", "mixed",
                                         "rag",  "coder",  "shift"};

struct GenFlags {
  std::string kind = "chat";
  std::string out;
  // Shared by every kind; copied into the chosen kind's options.
  uint32_t requests = 10000;
  uint64_t seed = 1;
  uint32_t block_size = 0;  // 0: the format's default
  std::string format = "mooncake";
  ChatWorkloadOptions chat;
  FanoutWorkloadOptions fanout;
  BatchWorkloadOptions batch;
  MixedWorkloadOptions mixed;  // its chat/fanout/batch come from the flags above
  RagWorkloadOptions rag;
  CoderWorkloadOptions coder;
  ShiftWorkloadOptions shift;  // its chat/rag/coder come from the flags above
};

// Validates and generates the kind `f.kind` names.
absl::StatusOr<Trace> Generate(GenFlags f) {
  if (f.block_size == 0) f.block_size = DefaultBlockSize(*TraceFormatFromName(f.format));
  f.chat.requests = f.fanout.requests = f.batch.requests = f.mixed.requests = f.rag.requests =
      f.coder.requests = f.shift.requests = f.requests;
  f.chat.seed = f.fanout.seed = f.batch.seed = f.mixed.seed = f.rag.seed = f.coder.seed =
      f.shift.seed = f.seed;
  f.chat.block_size = f.fanout.block_size = f.batch.block_size = f.mixed.block_size =
      f.rag.block_size = f.coder.block_size = f.shift.block_size = f.block_size;
  if (f.kind == "fanout") {
    if (auto s = ValidateFanoutWorkloadOptions(f.fanout); !s.ok()) return s;
    return GenerateFanoutTrace(f.fanout);
  }
  if (f.kind == "batch") {
    if (auto s = ValidateBatchWorkloadOptions(f.batch); !s.ok()) return s;
    return GenerateBatchTrace(f.batch);
  }
  if (f.kind == "mixed") {
    f.mixed.chat = f.chat;
    f.mixed.fanout = f.fanout;
    f.mixed.batch = f.batch;
    if (auto s = ValidateMixedWorkloadOptions(f.mixed); !s.ok()) return s;
    return GenerateMixedTrace(f.mixed);
  }
  if (f.kind == "rag") {
    if (auto s = ValidateRagWorkloadOptions(f.rag); !s.ok()) return s;
    return GenerateRagTrace(f.rag);
  }
  if (f.kind == "coder") {
    if (auto s = ValidateCoderWorkloadOptions(f.coder); !s.ok()) return s;
    return GenerateCoderTrace(f.coder);
  }
  if (f.kind == "shift") {
    f.shift.chat = f.chat;
    f.shift.rag = f.rag;
    f.shift.coder = f.coder;
    if (auto s = ValidateShiftWorkloadOptions(f.shift); !s.ok()) return s;
    return GenerateShiftTrace(f.shift);
  }
  if (auto s = ValidateChatWorkloadOptions(f.chat); !s.ok()) return s;
  return GenerateChatTrace(f.chat);
}

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
  auto generated = Generate(f);
  if (!generated.ok()) return Fail(generated.status());
  const Trace& trace = *generated;
  if (trace.requests.size() < f.requests) {
    std::cerr << "kvlearn gen: stopped at " << trace.requests.size()
              << " requests: a trace holds at most 2^32 block ids\n";
  }
  if (auto s = WriteTrace(trace, f.out, *TraceFormatFromName(f.format)); !s.ok()) return Fail(s);
  std::cout << "wrote " << trace.requests.size() << " requests (" << trace.hash_ids.size()
            << " block accesses, " << CountDistinctBlocks(trace) << " distinct blocks) to " << f.out
            << "\n";
  return 0;
}

}  // namespace

Command AddGenCommand(CLI::App& root) {
  auto flags = std::make_shared<GenFlags>();
  ChatWorkloadOptions& chat = flags->chat;
  CLI::App* cmd =
      root.add_subcommand("gen", "Generate a synthetic trace in Mooncake's or Bailian's JSONL");
  cmd->add_option("--kind", flags->kind,
                  "workload kind: chat (multi-turn conversations), fanout (agent sub-agents), "
                  "batch (extraction jobs), mixed (chat + fanout + batch), rag (shared documents, "
                  "bursty), coder (repository contexts growing by small edits), shift (the mix "
                  "changes partway through)")
      ->capture_default_str()
      ->check(CLI::IsMember(kKinds));
  cmd->add_option("--requests", flags->requests, "number of requests to generate")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  cmd->add_option("--seed", flags->seed, "random seed; the same seed gives the same trace")
      ->capture_default_str();
  cmd->add_option("--block-size", flags->block_size,
                  "tokens per block (default: 512 for mooncake, 16 for bailian)")
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--format", flags->format,
                  "output format: mooncake (timestamp in ms) or bailian (timestamp in seconds, "
                  "chat_id, parent_chat_id, type, turn; docs/results.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mooncake", "bailian"}));
  cmd->add_option("--out", flags->out, "output file (JSONL)")->required();

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

  // Fan-out knobs (--kind fanout, and the fan-out share of --kind mixed).
  FanoutWorkloadOptions& fan = flags->fanout;
  cmd->add_option("--agents-per-second", fan.agents_per_second,
                  "fanout: agents arriving per second (Poisson)")
      ->capture_default_str();
  cmd->add_option("--fanout", fan.mean_fanout,
                  "fanout: mean sub-agents per round W (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--fork-window", fan.fork_window_s,
                  "fanout: seconds within which a round's sub-agents arrive (uniform)")
      ->capture_default_str();
  cmd->add_option("--rounds", fan.mean_rounds, "fanout: mean rounds per agent (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--round-gap", fan.mean_round_gap_s,
                  "fanout: mean seconds between an agent's rounds (exponential)")
      ->capture_default_str();
  cmd->add_option("--context-tokens", fan.context_median_tokens,
                  "fanout: median task context in tokens, shared by the agent's sub-agents")
      ->capture_default_str();
  cmd->add_option("--subtask-tokens", fan.subtask_median_tokens,
                  "fanout: median sub-task in tokens, fresh per sub-agent (log-normal)")
      ->capture_default_str();
  cmd->add_option("--result-tokens", fan.result_median_tokens,
                  "fanout: median tokens of results added to the context per round")
      ->capture_default_str();

  // Batch knobs (--kind batch, and the batch share of --kind mixed).
  BatchWorkloadOptions& batch = flags->batch;
  cmd->add_option("--jobs-per-second", batch.jobs_per_second,
                  "batch: jobs arriving per second (Poisson)")
      ->capture_default_str();
  cmd->add_option("--documents", batch.mean_documents,
                  "batch: mean requests (documents) per job (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--job-rate", batch.job_requests_per_second,
                  "batch: requests per second within a job (Poisson)")
      ->capture_default_str();
  cmd->add_option("--instructions", batch.instructions,
                  "batch: distinct instruction templates (Zipf popularity, exponent 1)")
      ->capture_default_str();
  cmd->add_option("--instruction-tokens", batch.instruction_median_tokens,
                  "batch: median instruction prefix in tokens (log-normal, sigma 0.3)")
      ->capture_default_str();
  cmd->add_option("--document-tokens", batch.document_median_tokens,
                  "batch: median document in tokens, fresh per request (log-normal)")
      ->capture_default_str();

  // Mix knobs (--kind mixed): shares of the requests, normalised by their sum.
  cmd->add_option("--chat-share", flags->mixed.chat_share, "mixed: share of chat requests")
      ->capture_default_str();
  cmd->add_option("--fanout-share", flags->mixed.fanout_share, "mixed: share of fan-out requests")
      ->capture_default_str();
  cmd->add_option("--batch-share", flags->mixed.batch_share, "mixed: share of batch requests")
      ->capture_default_str();

  // RAG knobs (--kind rag, and the rag share of --kind shift).
  RagWorkloadOptions& rag = flags->rag;
  cmd->add_option("--bursts-per-second", rag.bursts_per_second,
                  "rag: query bursts arriving per second (Poisson)")
      ->capture_default_str();
  cmd->add_option("--burst-requests", rag.mean_burst_requests,
                  "rag: mean requests per burst, all reading the same documents (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--burst-gap", rag.mean_burst_gap_s,
                  "rag: mean seconds between a burst's requests (exponential)")
      ->capture_default_str();
  cmd->add_option("--rag-system-prompts", rag.system_prompts,
                  "rag: distinct system prompts (applications; Zipf popularity, exponent 1)")
      ->capture_default_str();
  cmd->add_option("--rag-system-prompt-tokens", rag.system_prompt_median_tokens,
                  "rag: median system prompt in tokens (log-normal, sigma 0.5)")
      ->capture_default_str();
  cmd->add_option("--corpus-documents", rag.documents, "rag: documents in the corpus")
      ->capture_default_str();
  cmd->add_option("--document-zipf", rag.document_zipf,
                  "rag: popularity exponent s (unitless): document k has weight 1/k^s")
      ->capture_default_str();
  cmd->add_option("--rag-document-tokens", rag.document_median_tokens,
                  "rag: median document in tokens (log-normal, drawn once per document)")
      ->capture_default_str();
  cmd->add_option("--rag-document-sigma", rag.document_sigma,
                  "rag: log-normal sigma of document lengths (natural-log units)")
      ->capture_default_str();
  cmd->add_option("--retrieved-documents", rag.mean_documents,
                  "rag: mean documents per request (geometric, >= 1, at most 16)")
      ->capture_default_str();
  cmd->add_option("--question-tokens", rag.question_median_tokens,
                  "rag: median question in tokens, fresh per request (log-normal, sigma 0.8)")
      ->capture_default_str();

  // Coder knobs (--kind coder, and the coder share of --kind shift).
  CoderWorkloadOptions& coder = flags->coder;
  cmd->add_option("--coder-sessions-per-second", coder.sessions_per_second,
                  "coder: coding sessions arriving per second (Poisson)")
      ->capture_default_str();
  cmd->add_option("--coder-turns", coder.mean_turns,
                  "coder: mean turns per session (geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--turn-gap", coder.mean_turn_gap_s,
                  "coder: mean seconds between a session's turns (exponential)")
      ->capture_default_str();
  cmd->add_option("--repositories", coder.repositories,
                  "coder: distinct repository contexts (Zipf popularity, exponent 1)")
      ->capture_default_str();
  cmd->add_option("--repository-tokens", coder.repository_median_tokens,
                  "coder: median repository context in tokens, shared by its sessions "
                  "(log-normal, sigma 0.3)")
      ->capture_default_str();
  cmd->add_option("--file-context-tokens", coder.file_context_median_tokens,
                  "coder: median first-turn file context in tokens, per session (log-normal)")
      ->capture_default_str();
  cmd->add_option("--edit-blocks", coder.mean_edit_blocks,
                  "coder: mean full blocks at the end of the previous prompt a turn re-writes "
                  "(geometric, >= 1)")
      ->capture_default_str();
  cmd->add_option("--growth-tokens", coder.growth_median_tokens,
                  "coder: median tokens a turn adds to the prompt (log-normal, sigma 1)")
      ->capture_default_str();

  // Shift knobs (--kind shift): when the mix changes, and the mix on each side
  // (shares of chat, rag and coder requests, normalised by their sum).
  ShiftWorkloadOptions& shift = flags->shift;
  cmd->add_option("--shift-at", shift.shift_at,
                  "shift: share of the requests before the mix changes, in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--before-chat-share", shift.before.chat, "shift: chat share before the shift")
      ->capture_default_str();
  cmd->add_option("--before-rag-share", shift.before.rag, "shift: rag share before the shift")
      ->capture_default_str();
  cmd->add_option("--before-coder-share", shift.before.coder, "shift: coder share before the shift")
      ->capture_default_str();
  cmd->add_option("--after-chat-share", shift.after.chat, "shift: chat share after the shift")
      ->capture_default_str();
  cmd->add_option("--after-rag-share", shift.after.rag, "shift: rag share after the shift")
      ->capture_default_str();
  cmd->add_option("--after-coder-share", shift.after.coder, "shift: coder share after the shift")
      ->capture_default_str();
  return {cmd, [flags] { return RunGen(*flags); }};
}

}  // namespace kvlearn
