// Multi-turn chat workload (see ChatWorkloadOptions).
//
// Each conversation's whole plan (turn times and lengths) is drawn when it
// arrives, so the random stream is consumed in arrival order and does not depend
// on how conversations interleave. Block ids are handed out when a turn is
// emitted, so ids grow with time as in Mooncake's traces.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/generator_support.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

using generator::Millis;
using generator::MustBeAtLeastOne;
using generator::MustBeNonNegative;
using generator::MustBePositive;
using generator::Tokens;

// System prompt lengths vary less than user messages: they are written once.
constexpr double kSystemPromptSigma = 0.5;

struct SystemPrompt {
  uint64_t tokens = 0;
  // Ids of its full blocks only: the block holding its tail also holds the
  // start of a user message, so that block differs per conversation.
  std::vector<uint64_t> ids;
};

struct Turn {
  int64_t at_ms = 0;
  uint32_t input_tokens = 0;   // system prompt + history + this user message
  uint32_t output_tokens = 0;  // reply, becomes history for the next turn
};

struct Conversation {
  std::vector<Turn> turns;
  size_t next_turn = 0;
  uint32_t system_prompt = 0;
  std::vector<uint64_t> ids;  // block chain of the last emitted turn
};

// Pending turn in the event queue; `conversation` numbers break time ties so the
// order never depends on the heap's internals.
struct PendingTurn {
  int64_t at_ms;
  uint64_t conversation;
  bool operator>(const PendingTurn& other) const {
    return at_ms != other.at_ms ? at_ms > other.at_ms : conversation > other.conversation;
  }
};

class ChatGenerator {
 public:
  explicit ChatGenerator(const ChatWorkloadOptions& o)
      : o_(o), rng_(o.seed), prompt_picker_(o.system_prompts, o.system_prompt_zipf) {
    prompts_.resize(o.system_prompts);
    for (SystemPrompt& p : prompts_) {
      // At most half the context, so a first user message always fits.
      p.tokens = Tokens(rng_.LogNormal(o.system_prompt_median_tokens, kSystemPromptSigma), 1,
                        o.max_input_tokens / 2);
      p.ids.resize(p.tokens / o.block_size);
      for (uint64_t& id : p.ids) id = next_id_++;
    }
  }

  Trace Run() {
    Trace trace;
    trace.source = absl::StrCat("chat(seed=", o_.seed, ", requests=", o_.requests, ")");
    trace.block_size = o_.block_size;
    trace.requests.reserve(o_.requests);

    std::priority_queue<PendingTurn, std::vector<PendingTurn>, std::greater<>> queue;
    std::vector<Conversation> slots;  // reused once a conversation ends
    std::vector<uint32_t> free_slots;
    std::vector<uint32_t> slot_of;  // conversation number -> slot
    int64_t next_arrival_ms = 0;    // the first conversation opens the trace, as in Mooncake

    while (trace.requests.size() < o_.requests) {
      if (queue.empty() || next_arrival_ms <= queue.top().at_ms) {
        uint32_t slot;
        if (free_slots.empty()) {
          slot = static_cast<uint32_t>(slots.size());
          slots.emplace_back();
        } else {
          slot = free_slots.back();
          free_slots.pop_back();
        }
        Plan(next_arrival_ms, slots[slot]);
        queue.push({next_arrival_ms, slot_of.size()});
        slot_of.push_back(slot);
        next_arrival_ms += Millis(rng_.Exponential(1.0 / o_.sessions_per_second));
        continue;
      }
      const PendingTurn pending = queue.top();
      queue.pop();
      const uint32_t slot = slot_of[pending.conversation];
      Conversation& c = slots[slot];
      if (!Emit(c, trace)) break;
      if (c.next_turn < c.turns.size()) {
        queue.push({c.turns[c.next_turn].at_ms, pending.conversation});
      } else {
        free_slots.push_back(slot);
      }
    }
    return trace;
  }

 private:
  // Draws a conversation's turns: times, and lengths that grow with the history.
  void Plan(int64_t start_ms, Conversation& c) {
    c.turns.clear();
    c.next_turn = 0;
    c.ids.clear();
    c.system_prompt = prompt_picker_.Sample(rng_);
    const uint32_t turns = rng_.Geometric(o_.mean_turns);
    uint64_t history = prompts_[c.system_prompt].tokens;
    int64_t at_ms = start_ms;
    for (uint32_t t = 0; t < turns; ++t) {
      const double median =
          t == 0 ? o_.first_message_median_tokens : o_.followup_message_median_tokens;
      const uint64_t message = Tokens(rng_.LogNormal(median, o_.message_sigma), 1,
                                      t == 0 ? o_.max_input_tokens - history : UINT32_MAX);
      const uint64_t input = history + message;
      if (input > o_.max_input_tokens) break;  // out of context: the user starts over
      const uint64_t output =
          Tokens(rng_.LogNormal(o_.output_median_tokens, o_.output_sigma), 1, o_.max_input_tokens);
      c.turns.push_back({at_ms, static_cast<uint32_t>(input), static_cast<uint32_t>(output)});
      history = input + output;
      at_ms += Millis(rng_.Exponential(o_.mean_think_time_s));
    }
  }

  // Appends the conversation's next turn. It keeps every full block of the
  // previous turn's prompt (or of the system prompt, on the first turn); the
  // previous partial block is re-issued because appending the reply and the new
  // message changed its content. Returns false, adding nothing, when the trace's
  // 32-bit block offsets would overflow.
  bool Emit(Conversation& c, Trace& trace) {
    const Turn& turn = c.turns[c.next_turn];
    if (c.next_turn == 0) {
      c.ids = prompts_[c.system_prompt].ids;
    } else {
      c.ids.resize(c.turns[c.next_turn - 1].input_tokens / o_.block_size);
    }
    const uint32_t blocks = BlocksForTokens(turn.input_tokens, o_.block_size);
    if (trace.hash_ids.size() + blocks > std::numeric_limits<uint32_t>::max()) return false;
    while (c.ids.size() < blocks) c.ids.push_back(next_id_++);
    trace.Add(turn.at_ms, turn.input_tokens, turn.output_tokens, c.ids);
    ++c.next_turn;
    return true;
  }

  const ChatWorkloadOptions o_;
  WorkloadRng rng_;
  ZipfSampler prompt_picker_;
  std::vector<SystemPrompt> prompts_;
  uint64_t next_id_ = 0;
};

}  // namespace

absl::Status ValidateChatWorkloadOptions(const ChatWorkloadOptions& o) {
  const generator::OptionError bad{"chat workload"};
  if (auto s = generator::CheckBlockSize(bad, o.block_size); !s.ok()) return s;
  if (auto s = bad.FirstBroken({
          MustBePositive("sessions_per_second", o.sessions_per_second),
          MustBeAtLeastOne("mean_turns", o.mean_turns),
          MustBeNonNegative("mean_think_time_s", o.mean_think_time_s),
          MustBePositive("system_prompts", o.system_prompts),
          MustBeNonNegative("system_prompt_zipf", o.system_prompt_zipf),
          MustBePositive("system_prompt_median_tokens", o.system_prompt_median_tokens),
          MustBePositive("first_message_median_tokens", o.first_message_median_tokens),
          MustBePositive("followup_message_median_tokens", o.followup_message_median_tokens),
          MustBeNonNegative("message_sigma", o.message_sigma),
          MustBePositive("output_median_tokens", o.output_median_tokens),
          MustBeNonNegative("output_sigma", o.output_sigma),
      });
      !s.ok()) {
    return s;
  }
  // Room for a system prompt token and a message token.
  return generator::CheckMaxInputTokens(bad, o.max_input_tokens, 2);
}

Trace GenerateChatTrace(const ChatWorkloadOptions& options) { return ChatGenerator(options).Run(); }

}  // namespace kvlearn
