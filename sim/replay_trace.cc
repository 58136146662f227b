#include "sim/replay_trace.h"

#include "absl/strings/str_cat.h"
#include "policies/policy_env.h"

namespace kvlearn {

absl::StatusOr<ReplayTrace> BuildReplayTrace(const Trace& trace, const CostModel& cost) {
  ReplayTrace out;
  out.trace = &trace;
  out.blocks.resize(trace.hash_ids.size());
  out.catalog.Reserve(trace.hash_ids.size() / 2);
  std::vector<uint32_t> first_line;  // per block, for error messages

  for (const TraceRequest& r : trace.requests) {
    BlockIndex parent = kNoBlock;
    for (uint32_t i = 0; i < r.num_blocks; ++i) {
      const uint64_t id = trace.hash_ids[r.first_block + i];
      BlockIndex b = out.catalog.Find(id);
      if (b == kNoBlock) {
        BlockMeta meta;
        meta.hash_id = id;
        meta.parent = parent;
        meta.depth = i;
        meta.tokens = trace.TokensOfBlock(r, i);
        meta.origin_type = r.type;
        meta.origin_turn = r.turn;
        meta.bytes = cost.BytesForTokens(meta.tokens);
        meta.recompute_gpu_ms = cost.BlockRecomputeGpuMs(i, meta.tokens, trace.block_size);
        b = out.catalog.Add(meta);
        first_line.push_back(r.line);
        out.distinct_block_bytes += meta.bytes;
      } else if (out.catalog[b].parent != parent) {
        const BlockIndex seen = out.catalog[b].parent;
        return absl::InvalidArgumentError(absl::StrCat(
            trace.source, ":", r.line, ": field 'hash_ids[", i, "]': block id ", id, " follows ",
            parent == kNoBlock ? "nothing" : absl::StrCat(out.catalog[parent].hash_id),
            " here but ", seen == kNoBlock ? "nothing" : absl::StrCat(out.catalog[seen].hash_id),
            " on line ", first_line[b], ", so the ids are not prefix hashes"));
      }
      out.blocks[r.first_block + i] = b;
      parent = b;
    }
  }

  // Walk backwards remembering, per block, the latest request seen so far.
  out.next_use.assign(out.blocks.size(), kNeverUsedAgain);
  std::vector<uint32_t> upcoming(out.catalog.size(), kNeverUsedAgain);
  for (size_t ri = trace.requests.size(); ri-- > 0;) {
    const TraceRequest& r = trace.requests[ri];
    for (uint32_t i = 0; i < r.num_blocks; ++i) {
      const BlockIndex b = out.blocks[r.first_block + i];
      out.next_use[r.first_block + i] = upcoming[b];
      upcoming[b] = static_cast<uint32_t>(ri);
    }
  }
  return out;
}

}  // namespace kvlearn
