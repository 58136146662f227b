#include "server/engine_ingest.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "server/event_log.h"
#include "server/node_pools.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {
namespace {

v1::Event* NewEvent(const std::string& node, v1::Tier tier, int64_t ts_us,
                    std::vector<v1::Event>& out) {
  v1::Event& e = out.emplace_back();
  e.set_node_id(node);
  e.set_tier(tier);
  e.set_timestamp_us(ts_us);
  return &e;
}

// Events of one KV cache group only: kvlearn models one cache per tier.
bool InMainGroup(const std::optional<int64_t>& group) { return !group || *group == 0; }

void Clear(const std::string& node, const absl::flat_hash_set<int>& tiers, int64_t ts_us,
           std::vector<v1::Event>& out) {
  for (const int tier : tiers) {
    NewEvent(node, static_cast<v1::Tier>(tier), ts_us, out)->mutable_all_blocks_cleared();
  }
}

}  // namespace

v1::Tier TierOfMedium(KvMedium medium) {
  switch (medium) {
    case KvMedium::kUnspecified:
    case KvMedium::kGpu:
      return v1::TIER_HBM;
    case KvMedium::kCpu:
      return v1::TIER_DRAM;
    case KvMedium::kDisk:
      return v1::TIER_SSD;
    case KvMedium::kOther:
      break;
  }
  return v1::TIER_POOL;
}

uint32_t ToKvlearnEvents(const std::string& node, const EngineEventBatch& batch,
                         const EngineMapping& mapping, absl::flat_hash_set<int>& tiers_seen,
                         std::vector<v1::Event>& out) {
  // Engines send seconds since the epoch as a float; negative or absurd
  // values would be refused by the pools, so clamp to 0.
  const int64_t ts_us = batch.ts > 0 && batch.ts < 1e12 ? static_cast<int64_t>(batch.ts * 1e6) : 0;
  if (batch.engine_restarted) Clear(node, tiers_seen, ts_us, out);
  uint32_t skipped = 0;
  for (const EngineEvent& event : batch.events) {
    if (const auto* stored = std::get_if<BlockStoredEvent>(&event)) {
      if (!InMainGroup(stored->group_idx)) {
        ++skipped;
        continue;
      }
      const v1::Tier tier = TierOfMedium(stored->medium);
      tiers_seen.insert(tier);
      const uint32_t tokens =
          stored->tokens_per_block > 0 ? stored->tokens_per_block : mapping.block_size;
      const auto bytes = static_cast<int64_t>(mapping.cost->BytesForTokens(tokens));
      std::optional<uint64_t> parent = stored->parent_block_hash;
      for (const uint64_t hash : stored->block_hashes) {
        auto* s = NewEvent(node, tier, ts_us, out)->mutable_block_stored();
        s->set_block_id(hash);
        if (parent) s->set_parent_id(*parent);
        s->set_tokens(tokens);
        s->set_bytes(bytes);
        parent = hash;
      }
    } else if (const auto* removed = std::get_if<BlockRemovedEvent>(&event)) {
      if (!InMainGroup(removed->group_idx)) {
        ++skipped;
        continue;
      }
      const v1::Tier tier = TierOfMedium(removed->medium);
      for (const uint64_t hash : removed->block_hashes) {
        NewEvent(node, tier, ts_us, out)->mutable_block_removed()->set_block_id(hash);
      }
    } else {
      // AllBlocksCleared carries no medium in the versions read: every tier.
      Clear(node, tiers_seen, ts_us, out);
    }
  }
  return skipped;
}

EngineIngest::EngineIngest(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                           EngineMapping mapping)
    : pools_(pools), log_(log), metrics_(metrics), mapping_(mapping) {}

void EngineIngest::OnBatch(const std::string& node, uint64_t sequence,
                           const EngineEventBatch& batch) {
  std::vector<v1::Event> events;
  skipped_.fetch_add(ToKvlearnEvents(node, batch, mapping_, tiers_seen_[node], events),
                     std::memory_order_relaxed);
  std::vector<std::string> accepted;
  accepted.reserve(events.size());
  for (const v1::Event& e : events) {
    const absl::Status s = pools_->Apply(e);
    if (s.ok()) {
      e.SerializeToString(&accepted.emplace_back());
      metrics_->CountIngested(static_cast<int>(e.kind_case()) - v1::Event::kRequestArrival);
      continue;
    }
    rejected_.fetch_add(1, std::memory_order_relaxed);
    metrics_->CountRejected(static_cast<int>(s.code()));
    absl::MutexLock lock(&mu_);
    last_rejection_ = absl::StrCat("engine ", node, " sequence ", sequence, ": ", s.message());
  }
  if (accepted.empty()) return;
  if (!log_->Append(accepted).ok()) {
    // Applied but not durable: counted, and the next restart will not have
    // them; the engine's next events still apply.
    log_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  applied_.fetch_add(accepted.size(), std::memory_order_relaxed);
}

std::string EngineIngest::last_rejection() const {
  absl::MutexLock lock(&mu_);
  return last_rejection_;
}

std::string EngineIngest::Render(const std::vector<EngineEndpointStats>& stats) const {
  std::string out;
  const auto family = [&out](const char* name, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
  };
  family("kvlearn_engine_events_applied_total",
         "kvlearn events from engine KV event streams applied to the pools and logged");
  absl::StrAppend(&out, "kvlearn_engine_events_applied_total ", applied(), "\n");
  family("kvlearn_engine_events_rejected_total",
         "kvlearn events from engine streams the pools refused (e.g. a removal of an unknown "
         "block)");
  absl::StrAppend(&out, "kvlearn_engine_events_rejected_total ", rejected(), "\n");
  family("kvlearn_engine_events_skipped_total",
         "engine events of a KV cache group other than 0, not modelled");
  absl::StrAppend(&out, "kvlearn_engine_events_skipped_total ",
                  skipped_.load(std::memory_order_relaxed), "\n");
  family("kvlearn_engine_log_failures_total",
         "engine batches applied but not written to the event log");
  absl::StrAppend(&out, "kvlearn_engine_log_failures_total ",
                  log_failures_.load(std::memory_order_relaxed), "\n");
  struct Counter {
    const char* name;
    const char* help;
    uint64_t EngineEndpointStats::*field;
  };
  static constexpr Counter kCounters[] = {
      {"kvlearn_engine_batches_total", "engine batches received and decoded",
       &EngineEndpointStats::batches},
      {"kvlearn_engine_stored_blocks_total", "blocks in BlockStored events",
       &EngineEndpointStats::stored_blocks},
      {"kvlearn_engine_removed_blocks_total", "blocks in BlockRemoved events",
       &EngineEndpointStats::removed_blocks},
      {"kvlearn_engine_malformed_total", "engine payloads that did not decode",
       &EngineEndpointStats::malformed},
      {"kvlearn_engine_unknown_tags_total", "engine events of a kind kvlearn does not know",
       &EngineEndpointStats::unknown_tags},
      {"kvlearn_engine_duplicates_total", "engine batches received twice (dropped)",
       &EngineEndpointStats::duplicates},
      {"kvlearn_engine_gaps_total", "holes in an engine's sequence numbers",
       &EngineEndpointStats::gaps},
      {"kvlearn_engine_batches_replayed_total", "batches recovered from an engine's replay socket",
       &EngineEndpointStats::batches_replayed},
      {"kvlearn_engine_sequences_lost_total", "sequence numbers neither received nor replayed",
       &EngineEndpointStats::sequences_lost},
      {"kvlearn_engine_restarts_total", "engine restarts seen (sequence back to 0)",
       &EngineEndpointStats::restarts},
  };
  for (const Counter& c : kCounters) {
    family(c.name, c.help);
    for (const EngineEndpointStats& s : stats) {
      absl::StrAppend(&out, c.name, "{engine=\"", s.node_id, "\"} ", s.*(c.field), "\n");
    }
  }
  return out;
}

}  // namespace kvlearn
