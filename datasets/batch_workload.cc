// Batch extraction workload (see BatchWorkloadOptions).
//
// Jobs are planned one at a time in arrival order, so the random stream is
// consumed in a fixed order; their requests are then sorted by time and
// numbered (PrefixTable, EmitPlanned). Planning stops once no job still to
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

constexpr double kInstructionSigma = 0.3;
constexpr double kOutputSigma = 0.5;

class BatchGenerator {
 public:
  explicit BatchGenerator(const BatchWorkloadOptions& o)
      : o_(o), rng_(o.seed), table_(o.block_size), picker_(o.instructions, o.instruction_zipf) {
    // At most half the context, so a document always fits.
    instructions_ = AddRootPrefixes(table_, rng_, o.instructions, o.instruction_median_tokens,
                                    kInstructionSigma, o.max_input_tokens / 2);
  }

  Trace Run() {
    return PlanPoissonSessions(
        o_.requests, o_.block_size, o_.jobs_per_second, rng_, table_,
        absl::StrCat("batch(seed=", o_.seed, ", requests=", o_.requests, ")"),
        [this](int64_t start_ms, std::vector<PlannedRequest>& out) { PlanJob(start_ms, out); });
  }

 private:
  void PlanJob(int64_t start_ms, std::vector<PlannedRequest>& planned) {
    const uint32_t instruction = instructions_[picker_.Sample(rng_)];
    const uint64_t prefix_tokens = table_.Tokens(instruction);
    const uint32_t documents = rng_.Geometric(o_.mean_documents);
    double at_s = 0;
    for (uint32_t d = 0; d < documents; ++d) {
      PlannedRequest p;
      p.at_ms = start_ms + Millis(at_s);
      p.seq = seq_++;
      p.prefix = instruction;
      p.input_tokens = static_cast<uint32_t>(
          prefix_tokens + Tokens(rng_.LogNormal(o_.document_median_tokens, o_.document_sigma), 1,
                                 o_.max_input_tokens - prefix_tokens));
      p.output_tokens = static_cast<uint32_t>(
          Tokens(rng_.LogNormal(o_.output_median_tokens, kOutputSigma), 1, o_.max_input_tokens));
      planned.push_back(p);
      at_s += rng_.Exponential(1.0 / o_.job_requests_per_second);
    }
  }

  const BatchWorkloadOptions o_;
  WorkloadRng rng_;
  PrefixTable table_;
  ZipfSampler picker_;
  std::vector<uint32_t> instructions_;
  uint64_t seq_ = 0;
};

}  // namespace

absl::Status ValidateBatchWorkloadOptions(const BatchWorkloadOptions& o) {
  const generator::OptionError bad{"batch workload"};
  if (auto s = generator::CheckBlockSize(bad, o.block_size); !s.ok()) return s;
  if (auto s = bad.FirstBroken({
          MustBePositive("requests", o.requests),
          MustBePositive("jobs_per_second", o.jobs_per_second),
          MustBeAtLeastOne("mean_documents", o.mean_documents),
          MustBePositive("job_requests_per_second", o.job_requests_per_second),
          MustBePositive("instructions", o.instructions),
          MustBeNonNegative("instruction_zipf", o.instruction_zipf),
          MustBePositive("instruction_median_tokens", o.instruction_median_tokens),
          MustBePositive("document_median_tokens", o.document_median_tokens),
          MustBeNonNegative("document_sigma", o.document_sigma),
          MustBePositive("output_median_tokens", o.output_median_tokens),
      });
      !s.ok()) {
    return s;
  }
  // Room for an instruction token and a document token.
  return generator::CheckMaxInputTokens(bad, o.max_input_tokens, 2);
}

Trace GenerateBatchTrace(const BatchWorkloadOptions& options) {
  return BatchGenerator(options).Run();
}

}  // namespace kvlearn
