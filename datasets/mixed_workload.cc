// Mixed workload (see MixedWorkloadOptions): chat, fan-out and batch traffic
// generated apart, their ids moved to disjoint ranges, merged by arrival time.
// Ties keep the components' order (chat, fan-out, batch) so the merge is
// deterministic.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "datasets/generator_support.h"
#include "datasets/workload_generator.h"

namespace kvlearn {
namespace {

// Component seeds: distinct, fixed functions of the mix's seed.
constexpr uint64_t kSeedStride = 0x9E3779B97F4A7C15ull;

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
    options.seed = o.seed + stream * kSeedStride;
    options.requests = n;
    options.block_size = o.block_size;
    parts.push_back(generate(options));
  };
  add(o.chat, o.chat_share, 1, GenerateChatTrace);
  add(o.fanout, o.fanout_share, 2, GenerateFanoutTrace);
  add(o.batch, o.batch_share, 3, GenerateBatchTrace);

  // Each part's ids are dense from 0; shift each past the previous parts'.
  std::vector<uint64_t> offset(parts.size(), 0);
  for (size_t p = 1; p < parts.size(); ++p) {
    uint64_t max_id = 0;
    for (uint64_t id : parts[p - 1].hash_ids) max_id = std::max(max_id, id);
    offset[p] = offset[p - 1] + max_id + 1;
  }

  Trace trace;
  trace.source = absl::StrCat("mixed(seed=", o.seed, ", requests=", o.requests, ")");
  trace.block_size = o.block_size;
  std::vector<size_t> next(parts.size(), 0);
  std::vector<uint64_t> ids;
  while (true) {
    size_t best = parts.size();
    for (size_t p = 0; p < parts.size(); ++p) {
      if (next[p] == parts[p].requests.size()) continue;
      if (best == parts.size() ||
          parts[p].requests[next[p]].timestamp_ms < parts[best].requests[next[best]].timestamp_ms) {
        best = p;
      }
    }
    if (best == parts.size()) break;
    const TraceRequest& r = parts[best].requests[next[best]++];
    const auto chain = parts[best].BlocksOf(r);
    if (trace.hash_ids.size() + chain.size() > UINT32_MAX) break;
    ids.assign(chain.begin(), chain.end());
    for (uint64_t& id : ids) id += offset[best];
    trace.Add(r.timestamp_ms, r.input_length, r.output_length, ids);
  }
  return trace;
}

}  // namespace kvlearn
