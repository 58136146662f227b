#include "learner/chain_sample.h"

namespace kvlearn {

uint32_t ChainBucket(std::span<const uint64_t> ids) {
  // splitmix64's finalizer: ids may be small sequential integers (Mooncake's),
  // so they are mixed before their top bits pick the bucket.
  uint64_t x = ids[ids.size() > 1 ? 1 : 0] + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<uint32_t>(x >> 48);
}

ChainSample PlanChainSample(const ChainBucketCounts& counts, uint64_t max_accesses) {
  ChainSample sample;
  for (const uint64_t a : counts.accesses()) sample.total_accesses += a;
  sample.kept_accesses = sample.total_accesses;
  if (max_accesses == 0 || sample.total_accesses <= max_accesses) return sample;
  uint64_t kept = 0;
  uint32_t buckets = 0;
  for (const uint64_t a : counts.accesses()) {
    if (kept > 0 && kept + a > max_accesses) break;
    kept += a;
    ++buckets;
  }
  sample.kept_buckets = buckets;
  sample.kept_accesses = kept;
  return sample;
}

Trace SampleTrace(const Trace& trace, const ChainSample& sample) {
  Trace out;
  out.source = trace.source;
  out.block_size = trace.block_size;
  out.skipped_lines = trace.skipped_lines;
  for (const TraceRequest& r : trace.requests) {
    const auto ids = trace.BlocksOf(r);
    if (!sample.Keeps(ids)) continue;
    // Add copies lengths and ids; the rest of the request (type, turn,
    // conversation ids) is kept as it was.
    out.Add(r.timestamp_ms, r.input_length, r.output_length, ids, r.line);
    TraceRequest& kept = out.requests.back();
    kept.type = r.type;
    kept.turn = r.turn;
    kept.chat_id = r.chat_id;
    kept.parent_chat_id = r.parent_chat_id;
  }
  return out;
}

}  // namespace kvlearn
