// The feature schema: which numbers describe a block at a decision point, in
// which order. Every model file records the version it was trained with and
// is refused by a build whose version differs. Bump kFeatureSchemaVersion on
// any change to the list, its order or how a feature is computed.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace kvlearn {

// Version 5: the request that first named the block, as the Bailian trace
// labels requests: its conversation turn and a one-hot of its type (all 0
// when the trace does not say, as Mooncake's does not).
// Version 4: recompute_ms_log and saving_ms_log price recompute in GPU-ms
// (the instance's prefill time x its GPUs, as cost_seconds does); before,
// in the instance's wall time, which under a multi-GPU profile such as
// llama3.3-70b (4 GPUs) valued a hit at a quarter of what it saves. Profiles
// of one GPU per instance compute the same values as version 3.
inline constexpr uint32_t kFeatureSchemaVersion = 5;

// Index of each feature in a feature vector. Logs are natural logs of 1 + x.
enum Feature : uint32_t {
  kDepth,            // position in the chain (0 = first block)
  kPrefixTokensLog,  // log1p(tokens up to and including this block)
  kBlockTokens,      // tokens in this block / 512
  kChildrenLog,      // log1p(distinct child blocks seen so far)
  kIsLeaf,           // 1 if resident with no resident child
  kBlockBytesLog,    // log1p(KV bytes of the block)
  kRecomputeMsLog,   // log1p(marginal recompute cost R, GPU-ms)
  kTransferMsLog,    // log1p(load cost T over the pool link, ms)
  kSavingMsLog,      // sign(R - T) * log1p(|R - T|), R in GPU-ms, T in ms
  kAgeLog,           // log1p(seconds since the previous access)
  kGap1Log,          // log1p(seconds between the last two accesses)...
  kGap2Log,          // ...and the ones before (LRB-style gap history;
  kGap3Log,          //    a missing gap reads as a day, one over
                     //    49.7 days as 49.7 days)
  kGap4Log,
  kDecayed1mLog,        // log1p(access count decayed with a 1 min time constant)
  kDecayed10mLog,       // ... 10 min
  kDecayed1hLog,        // ... 1 h
  kAccessesLog,         // log1p(accesses ever)
  kSubtreeAccessesLog,  // log1p(accesses that went on to a deeper block)
  kBurst1s,             // accesses within the last 1 s (of the last 6 kept)
  kBurst10s,            // accesses within the last 10 s (of the last 6 kept)
  kPoolOccupancy,       // used bytes / capacity of the pool
  kEvictionRate,        // evictions per request, moving average
  // Version 2: where the block sat in the latest request that used it. A
  // conversation's next turn re-reads its whole prompt, a shared system
  // prompt is followed by a private tail: the position tells them apart
  // where depth alone (prompts differ in length) does not.
  kTailBlocksLog,     // log1p(blocks after this one in its latest request)
  kRequestBlocksLog,  // log1p(blocks in its latest request)
  // Version 3: the block's siblings at its fork (the deepest known block of
  // the request that first used it): runs that left the same known prefix,
  // and how many of them were used again. Fresh sub-tasks of a fan-out or
  // documents of a batch job fork from one prefix and never return; a
  // conversation's first turns fork from its system prompt and often do.
  kForkRunsLog,    // log1p(children of the fork)
  kForkReusedLog,  // log1p(children of the fork accessed more than once)
  kForkGapLog,     // log1p(seconds between the fork's last two accesses)
  // Version 5: the request that first named the block (BlockMeta's origin):
  // whether a conversation goes on depends on its turn and on what it asked
  // for (Wang et al., ATC '25).
  kOriginTurnLog,  // log1p(its turn; 0: not known)
  kOriginText,     // 1 if its type is text...
  kOriginSearch,   // ...search
  kOriginImage,    // ...image
  kOriginFile,     // ...file (all four 0: another or no label)
  kNumFeatures
};

inline constexpr std::array<std::string_view, kNumFeatures> kFeatureNames = {
    "depth",
    "prefix_tokens_log",
    "block_tokens",
    "children_log",
    "is_leaf",
    "block_bytes_log",
    "recompute_ms_log",
    "transfer_ms_log",
    "saving_ms_log",
    "age_log",
    "gap1_log",
    "gap2_log",
    "gap3_log",
    "gap4_log",
    "decayed_1m_log",
    "decayed_10m_log",
    "decayed_1h_log",
    "accesses_log",
    "subtree_accesses_log",
    "burst_1s",
    "burst_10s",
    "pool_occupancy",
    "eviction_rate",
    "tail_blocks_log",
    "request_blocks_log",
    "fork_runs_log",
    "fork_reused_log",
    "fork_gap_log",
    "origin_turn_log",
    "origin_text",
    "origin_search",
    "origin_image",
    "origin_file",
};

}  // namespace kvlearn
