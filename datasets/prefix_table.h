// Shared prefixes for the synthetic generators that build requests on top of
// common context (agent fan-out, batch extraction, rag, coder): a table of prefixes, each
// extending a parent prefix (or nothing) to a total token count.
//
// Block ids are handed out lazily, the first time a request using the prefix
// is emitted, so ids grow with time as in Mooncake's traces whatever order the
// generator planned things in. A prefix owns the ids of its full blocks only:
// the block holding its tail also holds the start of whatever follows, so that
// block differs per request (as in the chat generator). Internal to datasets/.
//
// Not thread-safe; one table per generator run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "datasets/generator_support.h"
#include "datasets/trace.h"
#include "datasets/workload_generator.h"

namespace kvlearn {

class PrefixTable {
 public:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  explicit PrefixTable(uint32_t block_size) : block_size_(block_size) {}

  // REQUIRES: parent == kNone or tokens >= Tokens(parent).
  uint32_t Add(uint32_t parent, uint64_t tokens) {
    entries_.push_back({parent, tokens, false, {}});
    return static_cast<uint32_t>(entries_.size() - 1);
  }
  uint64_t Tokens(uint32_t p) const { return p == kNone ? 0 : entries_[p].tokens; }

  // Inserts a prefix of `tokens` tokens between `child` and its parent and
  // returns it; `child` then extends it. Lets a generator plan a request that
  // keeps only the start of an earlier request's prefix (a coding session's
  // next turn) and still share those blocks with it.
  // REQUIRES: nothing using `child` emitted yet (ids are handed out at
  // emission); Tokens(parent of child) <= tokens <= Tokens(child).
  uint32_t Split(uint32_t child, uint64_t tokens) {
    const uint32_t middle = Add(entries_[child].parent, tokens);
    entries_[child].parent = middle;
    return middle;
  }

  // Writes the chain of a request whose prompt is prefix `p` followed by fresh
  // tokens, `total_tokens` in all: the prefix's full-block ids, then new ids
  // from `next_id` up to ceil(total_tokens / block_size) blocks.
  // REQUIRES: total_tokens >= Tokens(p).
  void Chain(uint32_t p, uint64_t total_tokens, uint64_t& next_id, std::vector<uint64_t>& ids) {
    ids.clear();
    if (p != kNone) {
      Allocate(p, next_id);
      ids = entries_[p].ids;
    }
    const uint64_t blocks = (total_tokens + block_size_ - 1) / block_size_;
    while (ids.size() < blocks) ids.push_back(next_id++);
  }

 private:
  struct Entry {
    uint32_t parent;
    uint64_t tokens;
    bool allocated;
    std::vector<uint64_t> ids;  // full blocks only
  };

  void Allocate(uint32_t p, uint64_t& next_id) {
    if (entries_[p].allocated) return;
    std::vector<uint64_t> ids;
    if (const uint32_t parent = entries_[p].parent; parent != kNone) {
      Allocate(parent, next_id);
      ids = entries_[parent].ids;
    }
    const uint64_t full = entries_[p].tokens / block_size_;
    while (ids.size() < full) ids.push_back(next_id++);
    entries_[p].ids = std::move(ids);
    entries_[p].allocated = true;
  }

  uint32_t block_size_;
  std::vector<Entry> entries_;
};

// A request a generator has planned but not yet emitted: prefix `prefix`
// followed by fresh tokens up to `input_tokens`. `seq` (the planning order)
// breaks time ties so the emitted order never depends on the sort.
struct PlannedRequest {
  int64_t at_ms = 0;
  uint64_t seq = 0;
  uint32_t prefix = PrefixTable::kNone;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
};

// Plans sessions (agents, jobs) starting at the arrival times `next_gap_ms`
// yields, calling `plan(start_ms, planned)` for each, until no session still
// to start can land among the `requests` earliest planned requests: a session
// starting after the requests-th earliest time cannot contribute to the trace.
template <typename PlanSession, typename NextGapMs>
std::vector<PlannedRequest> PlanUntilCovered(uint32_t requests, PlanSession plan,
                                             NextGapMs next_gap_ms) {
  std::vector<PlannedRequest> planned;
  std::vector<int64_t> times;
  int64_t arrival_ms = 0;
  int64_t cutoff_ms = INT64_MAX;  // time of the requests-th earliest planned request
  while (arrival_ms <= cutoff_ms) {
    plan(arrival_ms, planned);
    arrival_ms += next_gap_ms();
    if (planned.size() >= requests) {
      times.clear();
      for (const PlannedRequest& p : planned) times.push_back(p.at_ms);
      std::nth_element(times.begin(), times.begin() + (requests - 1), times.end());
      cutoff_ms = times[requests - 1];
    }
  }
  return planned;
}

// Sorts `planned` by time and emits the first `requests` of them, numbering
// blocks as they go; times are shifted so the trace opens at 0, as Mooncake's do. Stops early
// (fewer requests) if the trace would hold more than 2^32 ids.
inline Trace EmitPlanned(std::vector<PlannedRequest>& planned, PrefixTable& table,
                         uint32_t requests, uint32_t block_size, std::string source) {
  std::sort(planned.begin(), planned.end(), [](const PlannedRequest& a, const PlannedRequest& b) {
    return a.at_ms != b.at_ms ? a.at_ms < b.at_ms : a.seq < b.seq;
  });
  Trace trace;
  trace.source = std::move(source);
  trace.block_size = block_size;
  const size_t n = std::min<size_t>(requests, planned.size());
  trace.requests.reserve(n);
  uint64_t next_id = 0;
  std::vector<uint64_t> ids;
  const int64_t start_ms = n > 0 ? planned[0].at_ms : 0;
  for (size_t i = 0; i < n; ++i) {
    const PlannedRequest& p = planned[i];
    table.Chain(p.prefix, p.input_tokens, next_id, ids);
    if (trace.hash_ids.size() + ids.size() > std::numeric_limits<uint32_t>::max()) break;
    trace.Add(p.at_ms - start_ms, p.input_tokens, p.output_tokens, ids);
  }
  return trace;
}

// Adds `count` prefixes of their own (system prompts, instructions,
// repository contexts) to `table`, each of LogNormal(median, sigma) tokens
// (drawn from `rng` in order) clamped to [1, max_tokens], and returns them.
inline std::vector<uint32_t> AddRootPrefixes(PrefixTable& table, WorkloadRng& rng, uint32_t count,
                                             double median, double sigma, uint64_t max_tokens) {
  std::vector<uint32_t> roots;
  for (uint32_t k = 0; k < count; ++k) {
    roots.push_back(table.Add(PrefixTable::kNone,
                              generator::Tokens(rng.LogNormal(median, sigma), 1, max_tokens)));
  }
  return roots;
}

// What the generators built on a PrefixTable (fan-out, batch, rag, coder)
// share: sessions (agents, jobs, bursts, coding sessions) start as a Poisson
// process at `sessions_per_second`, its gaps drawn from `rng` after each
// session is planned; `plan(start_ms, planned)` plans one; the first
// `requests` planned requests are emitted as the trace named `source`.
template <typename PlanSession>
Trace PlanPoissonSessions(uint32_t requests, uint32_t block_size, double sessions_per_second,
                          WorkloadRng& rng, PrefixTable& table, std::string source,
                          PlanSession plan) {
  std::vector<PlannedRequest> planned = PlanUntilCovered(requests, plan, [&] {
    return generator::Millis(rng.Exponential(1.0 / sessions_per_second));
  });
  return EmitPlanned(planned, table, requests, block_size, std::move(source));
}

}  // namespace kvlearn
