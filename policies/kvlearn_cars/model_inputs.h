// The 16 inputs of the kvlearn-cars reuse model: which features of the one
// FeatureExtractor it reads, in which order, and the raw (un-normalised)
// vector that carries them from scoring to a label and into the replay buffer.
//
// The paper's 16 features are (structural) prefix length, children, tree
// depth, is_image, is_video, log bytes; (temporal) access frequency decayed
// over 1/5/15 min, log recency, sin and cos of the hour, session age; (pool)
// occupancy, same-modality share of the pool, eviction rate. Our schema has
// no modality and no clock, so, in kCarsInputFeatures order:
//   prefix_tokens_log, children_log, depth      = prefix length, children, depth
//   block_tokens       for is_image: the kind of block that behaves differently
//                      in a text trace is the partial last block, reused only
//                      by an identical prompt
//   recompute_ms_log   for is_video: what modality stands for is a different
//                      recompute cost for the same bytes
//   block_bytes_log                              = log bytes
//   decayed_1m/10m/1h_log                        = frequency at 1/5/15 min
//   gap1_log           = log recency: the history records the current access
//                      before features are taken (as for "learned"), so age is
//                      0 at every decision and gap1 is the time since the
//                      previous access
//   gap2_log, subtree_accesses_log  for sin/cos hour: traces are an hour or
//                      so long, there is no time of day to learn; the gap
//                      before that and how often requests went past the block
//                      carry the periodicity that matters here
//   accesses_log       for session age (the history keeps no first-seen time)
//   pool_occupancy, eviction_rate                = occupancy, eviction rate
//   is_leaf            for modality share: the one per-block pool-state
//                      feature we have
#pragma once

#include <array>

#include "features/feature_schema.h"

namespace kvlearn {

inline constexpr int kCarsInputs = 16;

// The schema features the model reads, in the paper's order (structural,
// temporal, pool state); the header comment says which paper feature each
// stands for.
inline constexpr std::array<Feature, kCarsInputs> kCarsInputFeatures = {
    kPrefixTokensLog, kChildrenLog,   kDepth,        kBlockTokens,
    kRecomputeMsLog,  kBlockBytesLog, kDecayed1mLog, kDecayed10mLog,
    kDecayed1hLog,    kGap1Log,       kGap2Log,      kSubtreeAccessesLog,
    kAccessesLog,     kPoolOccupancy, kIsLeaf,       kEvictionRate};

// One block's model inputs as extracted, before normalisation. Stored raw
// (in label windows and the replay buffer) so that they are normalised with
// whatever map is current when they are used.
using CarsRawInputs = std::array<float, kCarsInputs>;

}  // namespace kvlearn
