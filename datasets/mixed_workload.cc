// Mixed workload (see MixedWorkloadOptions): chat, fan-out and batch traffic
// generated apart, their ids moved to disjoint ranges, merged by arrival time
// (MergeTraces; ties keep the components' order: chat, fan-out, batch).

#include <algorithm>
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

uint32_t Share(uint32_t requests, double share, double total) {
  return static_cast<uint32_t>(std::llround(requests * share / total));
}

}  // namespace

absl::Status ValidateMixedWorkloadOptions(const MixedWorkloadOptions& o) {
  const generator::OptionError bad{"mixed workload"};
  if (auto s = bad.FirstBroken({generator::MustBeNonNegative("chat_share", o.chat_share),
                                generator::MustBeNonNegative("fanout_share", o.fanout_share),
                                generator::MustBeNonNegative("batch_share", o.batch_share)});
      !s.ok()) {
    return s;
  }
  const double total = o.chat_share + o.fanout_share + o.batch_share;
  if (!(total > 0)) return bad("the sum of the shares", total, "> 0");
  if (o.requests == 0) return bad("requests", o.requests, "> 0");
  MixedWorkloadOptions copy = o;
  copy.chat.block_size = copy.fanout.block_size = copy.batch.block_size = o.block_size;
  copy.fanout.requests = copy.batch.requests = 1;
  if (auto s = ValidateChatWorkloadOptions(copy.chat); !s.ok()) return s;
  if (auto s = ValidateFanoutWorkloadOptions(copy.fanout); !s.ok()) return s;
  return ValidateBatchWorkloadOptions(copy.batch);
}

Trace GenerateMixedTrace(const MixedWorkloadOptions& o) {
  const double total = o.chat_share + o.fanout_share + o.batch_share;
  std::vector<Trace> parts;
  // Each kind gets its share of the requests and its own seed stream.
  const auto add = [&](auto options, double share, uint64_t stream, auto generate) {
    const uint32_t n = Share(o.requests, share, total);
    if (n == 0) return;
    options.seed = generator::ComponentSeed(o.seed, stream);
    options.requests = n;
    options.block_size = o.block_size;
    parts.push_back(generate(options));
  };
  add(o.chat, o.chat_share, 1, GenerateChatTrace);
  add(o.fanout, o.fanout_share, 2, GenerateFanoutTrace);
  add(o.batch, o.batch_share, 3, GenerateBatchTrace);

  return MergeTraces(parts, o.block_size,
                     absl::StrCat("mixed(seed=", o.seed, ", requests=", o.requests, ")"));
}

}  // namespace kvlearn
