#include "server/engine_ingest.h"

#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "server/event_log.h"
#include "server/framed_record.h"
#include "server/node_pools.h"
#include "server/sidecar_metrics.h"

namespace kvlearn {
namespace {

// Events of one KV cache group only: kvlearn models one cache per tier.
bool InMainGroup(const std::optional<int64_t>& group) { return !group || *group == 0; }

v1::Event* NewEvent(const std::function<v1::Event*()>& new_event, const std::string& node,
                    v1::Tier tier, int64_t ts_us) {
  v1::Event* e = new_event();
  e->set_node_id(node);
  e->set_tier(tier);
  e->set_timestamp_us(ts_us);
  return e;
}

void Clear(const std::function<v1::Event*()>& new_event, const std::string& node,
           const absl::flat_hash_set<int>& tiers, int64_t ts_us) {
  for (const int tier : tiers) {
    NewEvent(new_event, node, static_cast<v1::Tier>(tier), ts_us)->mutable_all_blocks_cleared();
  }
}

// Applied batches kept to decode into again.
constexpr size_t kMaxSpare = 64;

}  // namespace

// One log write's worth of work: the kvlearn events of the batches taken
// together, built on an arena (no allocation per event once it has grown),
// the accepted ones framed as the log entry's value, and the last sequence
// of each engine's batches in it.
class EngineIngest::Group {
 public:
  // A cleared event on the arena.
  v1::Event* NewEvent() { return google::protobuf::Arena::CreateMessage<v1::Event>(&arena_); }
  // Frames an applied event into the entry.
  void Accept(const v1::Event& e) {
    AppendFramedRecord(records_, e);
    ++accepted_;
  }
  // Notes that `node`'s batch `sequence` is in the group (batches come in
  // each engine's order, so the last one noted is its latest).
  void Took(const std::string& node, uint64_t sequence) {
    for (EventLog::EngineSequence& e : sequences_) {
      if (e.node == node) {
        e.sequence = sequence;
        return;
      }
    }
    sequences_.push_back({node, sequence});
  }
  const std::string& records() const { return records_; }
  uint64_t accepted() const { return accepted_; }
  const std::vector<EventLog::EngineSequence>& sequences() const { return sequences_; }
  void Reset() {
    arena_.Reset();
    records_.clear();
    accepted_ = 0;
    sequences_.clear();
  }

 private:
  google::protobuf::Arena arena_;
  std::string records_;
  uint64_t accepted_ = 0;
  std::vector<EventLog::EngineSequence> sequences_;  // a few engines: a vector beats a map
};

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
                         const std::function<v1::Event*()>& new_event) {
  // Engines send seconds since the epoch as a float; negative or absurd
  // values would be refused by the pools, so clamp to 0.
  const int64_t ts_us = batch.ts > 0 && batch.ts < 1e12 ? static_cast<int64_t>(batch.ts * 1e6) : 0;
  if (batch.engine_restarted) Clear(new_event, node, tiers_seen, ts_us);
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
        auto* s = NewEvent(new_event, node, tier, ts_us)->mutable_block_stored();
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
        NewEvent(new_event, node, tier, ts_us)->mutable_block_removed()->set_block_id(hash);
      }
    } else {
      // AllBlocksCleared carries no medium in the versions read: every tier.
      Clear(new_event, node, tiers_seen, ts_us);
    }
  }
  return skipped;
}

uint32_t ToKvlearnEvents(const std::string& node, const EngineEventBatch& batch,
                         const EngineMapping& mapping, absl::flat_hash_set<int>& tiers_seen,
                         std::vector<v1::Event>& out) {
  // Filled in place as they are made; the vector may move them as it grows.
  std::vector<v1::Event> made;
  const uint32_t skipped =
      ToKvlearnEvents(node, batch, mapping, tiers_seen, [&made] { return &made.emplace_back(); });
  for (v1::Event& e : made) out.push_back(std::move(e));
  return skipped;
}

EngineIngest::EngineIngest(NodePools* pools, EventLog* log, SidecarMetrics* metrics,
                           EngineMapping mapping, EngineIngestOptions options)
    : pools_(pools),
      log_(log),
      metrics_(metrics),
      mapping_(mapping),
      options_(options),
      group_(std::make_unique<Group>()) {
  if (options_.apply_thread) {
    thread_ = std::thread([this] { Run(); });
  } else {
    worker_done_ = true;
  }
}

EngineIngest::~EngineIngest() { Stop(); }

void EngineIngest::OnBatch(const std::string& node, uint64_t sequence, EngineEventBatch&& batch) {
  {
    std::unique_lock<std::mutex> lock(queue_mu_);
    if (options_.apply_thread) {
      progress_cv_.wait(
          lock, [this] { return queue_.size() < options_.max_queued_batches || stopping_; });
      if (!stopping_) {
        queue_.push_back({node, sequence, std::move(batch)});
        ++queued_total_;
        // The apply thread waits only on an empty queue.
        if (queue_.size() == 1) work_cv_.notify_one();
        return;
      }
      // Stopped: once the apply thread has drained, apply here.
      progress_cv_.wait(lock, [this] { return worker_done_; });
    }
  }
  // No apply thread: here, one log write per batch.
  Queued q{node, sequence, std::move(batch)};
  Apply(q, *group_);
  Write(*group_);
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (spare_.size() < kMaxSpare) spare_.push_back(std::move(q.batch));
}

void EngineIngest::OnBatch(const std::string& node, uint64_t sequence, EngineEventBatch* batch) {
  OnBatch(node, sequence, std::move(*batch));
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (spare_.empty()) return;
  *batch = std::move(spare_.back());
  spare_.pop_back();
}

void EngineIngest::Run() {
  std::deque<Queued> work;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      work_cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) {  // stopping, and drained
        worker_done_ = true;
        progress_cv_.notify_all();
        return;
      }
      work.swap(queue_);
      progress_cv_.notify_all();  // room in the queue
    }
    for (const Queued& q : work) {
      Apply(q, *group_);
      if (group_->accepted() >= options_.max_group_events) Write(*group_);
    }
    Write(*group_);
    std::lock_guard<std::mutex> lock(queue_mu_);
    done_total_ += work.size();
    progress_cv_.notify_all();  // Flush
    for (Queued& q : work) {
      if (spare_.size() >= kMaxSpare) break;
      spare_.push_back(std::move(q.batch));
    }
    work.clear();
  }
}

void EngineIngest::Apply(const Queued& q, Group& group) {
  auto [seen, first_batch] = tiers_seen_.try_emplace(q.node);
  if (first_batch) {
    // The tiers the start-up replay rebuilt for this node count as seen, so
    // an engine restart (or AllBlocksCleared) clears them too.
    for (const v1::Tier tier : {v1::TIER_HBM, v1::TIER_DRAM, v1::TIER_SSD, v1::TIER_POOL}) {
      if (pools_->EventsApplied(q.node, tier) > 0) seen->second.insert(tier);
    }
  }
  made_.clear();
  skipped_.fetch_add(ToKvlearnEvents(q.node, q.batch, mapping_, seen->second,
                                     [this, &group] {
                                       v1::Event* e = group.NewEvent();
                                       made_.push_back(e);
                                       return e;
                                     }),
                     std::memory_order_relaxed);
  for (const v1::Event* e : made_) {
    const absl::Status s = pools_->Apply(*e);
    if (s.ok()) {
      group.Accept(*e);
      metrics_->CountIngested(static_cast<int>(e->kind_case()) - v1::Event::kRequestArrival);
      if (e->has_request_arrival()) {
        const auto& ids = e->request_arrival().block_ids();
        metrics_->ObserveArrival(e->timestamp_us(), {ids.data(), static_cast<size_t>(ids.size())});
      }
      continue;
    }
    rejected_.fetch_add(1, std::memory_order_relaxed);
    metrics_->CountRejected(static_cast<int>(s.code()));
    absl::MutexLock lock(&mu_);
    last_rejection_ = absl::StrCat("engine ", q.node, " sequence ", q.sequence, ": ", s.message());
  }
  group.Took(q.node, q.sequence);
}

void EngineIngest::Write(Group& group) {
  if (group.accepted() > 0) {
    if (log_->AppendFramed(group.records(), group.accepted(), group.sequences()).ok()) {
      applied_.fetch_add(group.accepted(), std::memory_order_relaxed);
      log_writes_.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Applied but not durable: counted, and the next restart will not have
      // them; the engine's next events still apply.
      log_failures_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  group.Reset();
}

void EngineIngest::Flush() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  const uint64_t target = queued_total_;
  progress_cv_.wait(lock, [this, target] { return done_total_ >= target || worker_done_; });
}

void EngineIngest::Stop() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  progress_cv_.notify_all();  // OnBatch waiting for room
  if (thread_.joinable()) thread_.join();
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
         "groups of engine batches applied but not written to the event log");
  absl::StrAppend(&out, "kvlearn_engine_log_failures_total ",
                  log_failures_.load(std::memory_order_relaxed), "\n");
  family("kvlearn_engine_log_writes_total",
         "event log writes of engine events (one RocksDB write per group of batches)");
  absl::StrAppend(&out, "kvlearn_engine_log_writes_total ", log_writes(), "\n");
  struct Counter {
    const char* name;
    const char* help;
    uint64_t EngineEndpointStats::*field;
  };
  static constexpr Counter kCounters[] = {
      {"kvlearn_engine_batches_total", "engine batches received and decoded",
       &EngineEndpointStats::batches},
      {"kvlearn_engine_stored_events_total", "BlockStored events received",
       &EngineEndpointStats::stored_events},
      {"kvlearn_engine_removed_events_total", "BlockRemoved events received",
       &EngineEndpointStats::removed_events},
      {"kvlearn_engine_stored_blocks_total", "blocks in BlockStored events",
       &EngineEndpointStats::stored_blocks},
      {"kvlearn_engine_removed_blocks_total", "blocks in BlockRemoved events",
       &EngineEndpointStats::removed_blocks},
      {"kvlearn_engine_malformed_total", "engine payloads that did not decode",
       &EngineEndpointStats::malformed},
      {"kvlearn_engine_unknown_tags_total", "engine events of a kind kvlearn does not know",
       &EngineEndpointStats::unknown_tags},
      {"kvlearn_engine_duplicates_total", "live engine batches already dealt with (dropped)",
       &EngineEndpointStats::duplicates},
      {"kvlearn_engine_gaps_total", "holes in an engine's sequence numbers",
       &EngineEndpointStats::gaps},
      {"kvlearn_engine_batches_replayed_total", "batches recovered from an engine's replay socket",
       &EngineEndpointStats::batches_replayed},
      {"kvlearn_engine_sequences_lost_total", "sequence numbers neither received nor replayed",
       &EngineEndpointStats::sequences_lost},
      {"kvlearn_engine_restarts_total", "engine restarts seen (sequence back to 0)",
       &EngineEndpointStats::restarts},
      {"kvlearn_engine_connection_drops_total",
       "connections to an engine's PUB address that ended (the engine went away, or a message "
       "over 64 MiB), each replaced at once by a fresh subscription",
       &EngineEndpointStats::connection_drops},
      {"kvlearn_engine_replay_connection_drops_total",
       "connections to an engine's replay address that ended (the same causes); the sequence "
       "the answer had reached is counted lost and the rest asked for again",
       &EngineEndpointStats::replay_connection_drops},
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
