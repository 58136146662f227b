#include "sim/trace_sample.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "core/splitmix64.h"

namespace kvlearn {
namespace {

struct BlockUse {
  uint32_t requests = 0;  // requests that read the block
  uint32_t tokens = 0;    // at its first read
  // Unshared: read by a kept request (counted once); shared: warmed.
  bool in_sample = false;
};

using BlockUses = absl::flat_hash_map<uint64_t, BlockUse>;

BlockUses CountBlockUses(const Trace& full) {
  BlockUses uses;
  uses.reserve(full.hash_ids.size() / 4);
  for (const TraceRequest& r : full.requests) {
    const std::span<const uint64_t> ids = full.BlocksOf(r);
    for (uint32_t i = 0; i < ids.size(); ++i) {
      auto [it, fresh] = uses.try_emplace(ids[i]);
      if (fresh) it->second.tokens = full.TokensOfBlock(r, i);
      ++it->second.requests;
    }
  }
  return uses;
}

// Uniform in [0, 1) from the key, the salt mixed in first so that salts give
// unrelated samples.
double KeyPoint(uint64_t key, uint64_t salt) {
  return static_cast<double>(SplitMix64Mix(key ^ SplitMix64Mix(salt + 0x9e3779b97f4a7c15ULL)) >>
                             11) *
         0x1.0p-53;
}

// No-pool cost, GPU-ms, of requests[skip:] from `eval_from` x their count on.
double NoPoolGpuMs(const Trace& trace, const CostModel& cost, double eval_from, size_t skip = 0) {
  const size_t n = trace.requests.size() - skip;
  const size_t start = skip + static_cast<size_t>(eval_from * n);
  double total = 0;
  for (size_t i = start; i < trace.requests.size(); ++i) {
    total += cost.RecomputeGpuMs(0, trace.requests[i].input_length);
  }
  return total;
}

// Requests reading each shared chain the kept requests hold, once: a kept
// request's shared blocks are its leading ones (a block's readers read its
// parent too), so its chain up to the last of them is one.
Trace WarmupRequests(const Trace& kept, BlockUses& uses, uint64_t threshold) {
  Trace warmup;
  if (kept.requests.empty()) return warmup;
  const int64_t at = kept.requests.front().timestamp_ms;
  for (const TraceRequest& r : kept.requests) {
    const std::span<const uint64_t> ids = kept.BlocksOf(r);
    size_t shared = 0;
    while (shared < ids.size() && uses.find(ids[shared])->second.requests >= threshold) ++shared;
    if (shared == 0) continue;
    BlockUse& last = uses.find(ids[shared - 1])->second;
    if (last.in_sample) continue;  // its chain is warmed already
    uint32_t tokens = 0;
    for (size_t i = 0; i < shared; ++i) {
      BlockUse& use = uses.find(ids[i])->second;
      use.in_sample = true;
      tokens += use.tokens;
    }
    warmup.Add(at, tokens, 0, ids.first(shared));
  }
  return warmup;
}

}  // namespace

double TraceSample::byte_rate() const {
  const uint64_t unshared = full_distinct_tokens - shared_tokens;
  return unshared > 0 ? static_cast<double>(sampled_unshared_tokens) / unshared : 1.0;
}

TraceSample SampleTrace(const Trace& full, const TraceSampleOptions& options) {
  TraceSample out;
  out.rate = options.rate;
  out.trace.source = full.source;
  out.trace.block_size = full.block_size;
  out.trace.skipped_lines = full.skipped_lines;
  out.full_requests = full.requests.size();
  out.full_block_accesses = full.hash_ids.size();
  out.shared_threshold =
      std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(options.popular_uses / options.rate)));

  BlockUses uses = CountBlockUses(full);
  for (const auto& [id, use] : uses) {
    out.full_distinct_tokens += use.tokens;
    if (use.requests >= out.shared_threshold) {
      ++out.shared_blocks;
      out.shared_tokens += use.tokens;
    }
  }

  for (size_t ri = 0; ri < full.requests.size(); ++ri) {
    const TraceRequest& r = full.requests[ri];
    const std::span<const uint64_t> ids = full.BlocksOf(r);
    // A request without blocks shares nothing: its own index keys it.
    uint64_t key = ids.empty() ? ~uint64_t{ri} : ids.back();
    for (const uint64_t id : ids) {
      if (uses.find(id)->second.requests < out.shared_threshold) {
        key = id;
        break;
      }
    }
    if (KeyPoint(key, options.salt) >= options.rate) continue;
    for (const uint64_t id : ids) {
      BlockUse& use = uses.find(id)->second;
      if (use.requests < out.shared_threshold && !use.in_sample) {
        use.in_sample = true;
        out.sampled_unshared_tokens += use.tokens;
      }
    }
    TraceRequest kept = r;
    kept.first_block = static_cast<uint32_t>(out.trace.hash_ids.size());
    out.trace.hash_ids.insert(out.trace.hash_ids.end(), ids.begin(), ids.end());
    out.trace.requests.push_back(kept);
  }

  // The warm-up first, then the kept requests. At rate 1 nothing is scaled,
  // so there is nothing to warm: the sample is the trace.
  Trace warm;
  if (options.rate < 1) warm = WarmupRequests(out.trace, uses, out.shared_threshold);
  out.warmup_requests = static_cast<uint32_t>(warm.requests.size());
  for (const TraceRequest& r : out.trace.requests) warm.Add(0, 0, 0, out.trace.BlocksOf(r));
  for (size_t i = 0; i < out.trace.requests.size(); ++i) {
    TraceRequest& r = warm.requests[out.warmup_requests + i];
    const uint32_t first_block = r.first_block;
    r = out.trace.requests[i];
    r.first_block = first_block;
  }
  warm.source = out.trace.source;
  warm.block_size = out.trace.block_size;
  warm.skipped_lines = out.trace.skipped_lines;
  out.trace = std::move(warm);
  return out;
}

double SampleEvalFrom(const TraceSample& sample, double eval_from) {
  const size_t n = sample.trace.requests.size();
  const size_t kept = n - sample.warmup_requests;
  const size_t start = sample.warmup_requests + static_cast<size_t>(eval_from * kept);
  // Half a request over `start`, so the replay's floor(eval_from x n) is start.
  return n > 0 ? (static_cast<double>(start) + 0.5) / static_cast<double>(n) : 0;
}

uint64_t SampleScale::SampledPoolBytes(uint64_t full_pool_bytes) const {
  const uint64_t shared = std::min(full_pool_bytes, shared_bytes);
  return shared + static_cast<uint64_t>(byte_rate * static_cast<double>(full_pool_bytes - shared));
}

SampleScale ScaleOfSample(const Trace& full, const TraceSample& sample, const CostModel& cost,
                          double eval_from) {
  SampleScale s;
  const double full_cost = NoPoolGpuMs(full, cost, eval_from);
  const double sampled_cost = NoPoolGpuMs(sample.trace, cost, eval_from, sample.warmup_requests);
  s.cost_rate = full_cost > 0 && sampled_cost > 0 ? sampled_cost / full_cost : sample.rate;
  s.byte_rate = sample.byte_rate();
  s.full_distinct_bytes = cost.BytesForTokens(sample.full_distinct_tokens);
  s.shared_bytes = cost.BytesForTokens(sample.shared_tokens);
  const auto start = static_cast<size_t>(eval_from * full.requests.size());
  s.full_requests = full.requests.size() - start;
  for (size_t i = start; i < full.requests.size(); ++i) {
    s.full_block_accesses += full.requests[i].num_blocks;
  }
  return s;
}

}  // namespace kvlearn
