// Retrieval-augmented generation workload (see RagWorkloadOptions).
//
// What it models, from public descriptions of such traffic:
// - Alibaba's production KV-cache study (Wang et al., "KVCache Cache in the
//   Wild", USENIX ATC '25, arXiv 2506.02634) finds reuse highly skewed (10% of
//   blocks take 77% of the reuses), that in API traffic single-turn requests
//   sharing a prefix give nearly all hits, and that 80% of those reuses come
//   within 10 seconds: hence Zipf-popular documents and system prompts, and
//   bursts of requests seconds apart reading the same documents.
// - A request is the application's instructions, the retrieved passages and
//   the user's question, in that order (the usual RAG prompt layout), so the
//   shared part is a prefix and the question is a short fresh tail.
// - Length: about 30 blocks of 512 tokens per request on average, as in the
//   production long-prompt trace the project keeps for judging.
//
// Bursts are planned one at a time in arrival order, so the random stream is
// consumed in a fixed order; their requests are then sorted by time and
// numbered (PrefixTable, EmitPlanned).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
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

constexpr double kSystemPromptSigma = 0.5;
constexpr double kQuestionSigma = 0.8;
constexpr double kOutputSigma = 0.75;
// A request retrieves at most this many documents (top-k retrieval).
constexpr uint32_t kMaxDocuments = 16;
// Room kept for the question when documents are packed into the context.
constexpr uint64_t kQuestionRoom = 1024;

class RagGenerator {
 public:
  explicit RagGenerator(const RagWorkloadOptions& o)
      : o_(o),
        rng_(o.seed),
        table_(o.block_size),
        prompt_picker_(o.system_prompts, o.system_prompt_zipf),
        document_picker_(o.documents, o.document_zipf) {
    // At most a quarter of the context, so documents and a question fit.
    prompts_ = AddRootPrefixes(table_, rng_, o.system_prompts, o.system_prompt_median_tokens,
                               kSystemPromptSigma, o.max_input_tokens / 4);
    document_tokens_.reserve(o.documents);
    for (uint32_t d = 0; d < o.documents; ++d) {
      document_tokens_.push_back(Tokens(rng_.LogNormal(o.document_median_tokens, o.document_sigma),
                                        1, o.max_input_tokens));
    }
  }

  Trace Run() {
    return PlanPoissonSessions(
        o_.requests, o_.block_size, o_.bursts_per_second, rng_, table_,
        absl::StrCat("rag(seed=", o_.seed, ", requests=", o_.requests, ")"),
        [this](int64_t start_ms, std::vector<PlannedRequest>& out) { PlanBurst(start_ms, out); });
  }

 private:
  void PlanBurst(int64_t start_ms, std::vector<PlannedRequest>& planned) {
    uint32_t prefix = prompts_[prompt_picker_.Sample(rng_)];
    // Retrieval: distinct documents, by popularity, in retrieval order.
    const uint32_t wanted =
        std::min({rng_.Geometric(o_.mean_documents), kMaxDocuments, o_.documents});
    std::vector<uint32_t> chosen;
    while (chosen.size() < wanted) {
      const uint32_t d = document_picker_.Sample(rng_);
      if (std::find(chosen.begin(), chosen.end(), d) == chosen.end()) chosen.push_back(d);
    }
    for (const uint32_t d : chosen) {
      const uint64_t tokens = table_.Tokens(prefix) + document_tokens_[d];
      if (tokens + kQuestionRoom > o_.max_input_tokens) break;  // does not fit: left out
      prefix = Extend(prefix, d, tokens);
    }
    const uint64_t prefix_tokens = table_.Tokens(prefix);
    const uint32_t requests = rng_.Geometric(o_.mean_burst_requests);
    double at_s = 0;
    for (uint32_t i = 0; i < requests; ++i) {
      PlannedRequest p;
      p.at_ms = start_ms + Millis(at_s);
      p.seq = seq_++;
      p.prefix = prefix;
      p.input_tokens = static_cast<uint32_t>(
          prefix_tokens + Tokens(rng_.LogNormal(o_.question_median_tokens, kQuestionSigma), 1,
                                 o_.max_input_tokens - prefix_tokens));
      p.output_tokens = static_cast<uint32_t>(
          Tokens(rng_.LogNormal(o_.output_median_tokens, kOutputSigma), 1, o_.max_input_tokens));
      planned.push_back(p);
      at_s += rng_.Exponential(o_.mean_burst_gap_s);
    }
  }

  // The prefix `parent` followed by document `d` (`tokens` in all), one entry
  // per distinct (parent, document) pair so equal prefixes share their ids.
  uint32_t Extend(uint32_t parent, uint32_t d, uint64_t tokens) {
    const auto [it, inserted] = children_.try_emplace({parent, d}, 0);
    if (inserted) it->second = table_.Add(parent, tokens);
    return it->second;
  }

  const RagWorkloadOptions o_;
  WorkloadRng rng_;
  PrefixTable table_;
  ZipfSampler prompt_picker_;
  ZipfSampler document_picker_;
  std::vector<uint32_t> prompts_;
  std::vector<uint64_t> document_tokens_;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> children_;  // (parent, document) -> prefix
  uint64_t seq_ = 0;
};

}  // namespace

absl::Status ValidateRagWorkloadOptions(const RagWorkloadOptions& o) {
  const generator::OptionError bad{"rag workload"};
  if (auto s = generator::CheckBlockSize(bad, o.block_size); !s.ok()) return s;
  if (auto s = bad.FirstBroken({
          MustBePositive("requests", o.requests),
          MustBePositive("bursts_per_second", o.bursts_per_second),
          MustBeAtLeastOne("mean_burst_requests", o.mean_burst_requests),
          MustBeNonNegative("mean_burst_gap_s", o.mean_burst_gap_s),
          MustBePositive("system_prompts", o.system_prompts),
          MustBeNonNegative("system_prompt_zipf", o.system_prompt_zipf),
          MustBePositive("system_prompt_median_tokens", o.system_prompt_median_tokens),
          MustBePositive("documents", o.documents),
          MustBeNonNegative("document_zipf", o.document_zipf),
          MustBePositive("document_median_tokens", o.document_median_tokens),
          MustBeNonNegative("document_sigma", o.document_sigma),
          MustBeAtLeastOne("mean_documents", o.mean_documents),
          MustBePositive("question_median_tokens", o.question_median_tokens),
          MustBePositive("output_median_tokens", o.output_median_tokens),
      });
      !s.ok()) {
    return s;
  }
  // Room for a system prompt's quarter of the context and a question.
  return generator::CheckMaxInputTokens(bad, o.max_input_tokens, 4 * kQuestionRoom);
}

Trace GenerateRagTrace(const RagWorkloadOptions& options) { return RagGenerator(options).Run(); }

}  // namespace kvlearn
