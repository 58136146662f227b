// Spatially hashed sampling of a trace, SHARDS-style (Waldspurger et al.,
// FAST '15): keep the requests whose key hashes below rate x 2^64, replay them
// in a pool rate times smaller, and scale the costs back by 1 / rate.
//
// SHARDS keys single cache entries, so every access of a sampled entry is
// kept. Here a request reads a chain of blocks and a block is of use only
// behind its prefix, so whole requests are sampled, keyed so that every block
// keeps that all-or-nothing property unless it is shared by many requests:
//   - a block is *shared* when at least popular_uses / rate requests read it
//     (then the sample still holds about popular_uses of its reads);
//   - a request's key is the first block of its chain that is not shared (the
//     last block when all are). Block ids stand for whole prefixes, so every
//     request that reads an unshared block B has the same chain up to B and
//     hence the same key: all of B's reads are kept, or none.
// Without ids (Mooncake's format, where the shipped sample's requests all
// start with one block) this finds a conversation's own first block behind the
// shared system prompt; with Bailian's chat ids it needs none of them, and a
// conversation whose turns share their first unshared block stays whole.
//
// Shared blocks are read by a sampled share of their requests but are all in
// the sample, hot as in the full trace. Two consequences:
//   - their first read in the sample misses, and scaled back that one miss
//     would count 1 / rate times, where the full trace misses once. So the
//     sample opens with warm-up requests that read every shared chain it
//     holds, before the requests whose costs count (its first
//     warmup_requests; the full trace's own first misses are then left out,
//     one per shared block instead of 1 / rate);
//   - the sampled pool holds them at full size: a full pool of Q bytes with
//     S shared bytes becomes
//   r_b x (Q - S) + min(Q, S)   (SampledPoolBytes)
// where r_b is the sampled share of the unshared distinct bytes as drawn (not
// the nominal rate: a draw of longer conversations gets a larger pool). Costs scale back by r_c,
// the sampled share of the cost with no pool at all over the evaluated requests, which the full
// trace gives exactly.
#pragma once

#include <cstdint>

#include "core/cost_model.h"
#include "datasets/trace.h"

namespace kvlearn {

struct TraceSampleOptions {
  double rate = 0.01;  // in (0, 1]; 1 keeps every request
  uint64_t salt = 0;   // another salt draws another sample
  // A block read by at least popular_uses / rate requests is shared.
  double popular_uses = 32;
};

struct TraceSample {
  // The warm-up requests (at the first kept request's arrival), then the kept
  // requests in trace order, every field as read.
  Trace trace;
  uint32_t warmup_requests = 0;
  double rate = 0;
  uint64_t shared_threshold = 0;  // requests reading a block that make it shared
  uint64_t shared_blocks = 0;
  // Distinct-block tokens (a block's tokens at its first read in the full
  // trace, as the replay's catalog counts them).
  uint64_t full_distinct_tokens = 0;
  uint64_t shared_tokens = 0;            // of the shared blocks
  uint64_t sampled_unshared_tokens = 0;  // unshared blocks the sample reads
  uint64_t full_requests = 0;
  uint64_t full_block_accesses = 0;
  // Sampled share of the unshared distinct tokens (r_b above); 1 when the
  // trace has no unshared block.
  double byte_rate() const;
};

// REQUIRES: 0 < options.rate <= 1, options.popular_uses > 0. Linear in the
// trace; holds one hash-map entry per distinct block.
TraceSample SampleTrace(const Trace& full, const TraceSampleOptions& options);

// What maps the sample's replay back to the full trace.
struct SampleScale {
  double cost_rate = 1;  // r_c: divide costs and counts by it
  double byte_rate = 1;  // r_b
  uint64_t full_distinct_bytes = 0;
  uint64_t shared_bytes = 0;
  uint64_t full_requests = 0;  // evaluated requests of the full trace
  uint64_t full_block_accesses = 0;
  // The sampled pool standing for a full pool of `full_pool_bytes`.
  uint64_t SampledPoolBytes(uint64_t full_pool_bytes) const;
};

// The eval_from to replay `sample` with, for `eval_from` of the full trace:
// the warm-up requests, then that share of the kept ones, only warm the pool.
double SampleEvalFrom(const TraceSample& sample, double eval_from);

// r_c from the cost with no pool of the evaluated requests (those from
// eval_from x requests on, in the full trace and in the sample's kept
// requests): prefill of every prompt token.
SampleScale ScaleOfSample(const Trace& full, const TraceSample& sample, const CostModel& cost,
                          double eval_from);

}  // namespace kvlearn
