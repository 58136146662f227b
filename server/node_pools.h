// The sidecar's view of every serving node's caches: one shard per
// (node, tier), each holding a BlockCatalog, a PoolState and a retention
// policy, driven by the same PolicyDriver (policies/policy_driver.h) the
// simulators use, one driver call per event:
//
//   request arrival  -> AnnounceRequest; Hold the chain (pins) until
//                       request_finished names its id, or, without an id,
//                       until the next arrival (one request at a time)
//   request finished -> Release the chain
//   block hit        -> Hit                    (the node sends them deepest first)
//   Admit            -> ShouldAdmit per candidate; the first refusal ends it
//   RankEviction     -> proposes: NextVictim / EvictLeaf until the bytes are
//                       free (or RankVictims over a candidate list). The
//                       policy and its pool let the victims go at once (so the
//                       next victim is the one the simulator would take next),
//                       but the view (what the node holds: hits, stores,
//                       GetStatus) keeps them until block_removed confirms.
//                       A victim the node uses again (block_hit, an arrival's
//                       chain, block_stored) is withdrawn: it goes back to the
//                       policy as a fresh insert. Unconfirmed victims are
//                       proposed again first by the next RankEviction.
//   block stored     -> Insert; its tokens and bytes replace the ones assumed
//   block removed    -> EvictLeaf, or confirms a proposal; a block that
//                       still has children in the view takes them along
//                       (every descendant, leaves first): the node's word
//                       is the truth, and a block without its prefix is
//                       unreachable to prefix hits
//
// so that one node replaying a trace through the sidecar makes the same
// decisions as `kvlearn compare` on that trace. The node decides when it
// needs room and asks for the bytes it is missing; the pool capacity a node
// declares (pool_configured) only matters to policies that size queues from
// it (s3fifo, arc). Input checks that need no pool live in
// server/request_validation.h.
//
// Decision journal: the decision calls change pools too (Admit asks the
// policy, which may count or draw; RankEviction asks for victims, which may
// reorder queues, and evicts). Once a journal is set, every Admit and
// RankEviction that got past its input checks is journaled, under its shard's
// lock and before its answer is returned, as a record: kind, the number of
// events the shard had applied before it, and the request. RedoDecision runs a
// record again; at start-up server/log_replay.h interleaves the journaled
// decisions with the logged events at those counts, which rebuilds each pool
// exactly.
//
// Catalogs grow as hash ids arrive: a block's parent is the previous id of the
// request's chain (or the parent of a stored event / Admit candidate); an id
// seen behind two different parents is refused with INVALID_ARGUMENT.
//
// Experiment (server/experiment.h): each node runs its live arm's policy and
// model; without one set, a single arm named after `policy` serves every
// node. Every pool also charges each request it serves to its arm and drives
// the experiment's shadow policies (server/shadow_pool.h), both counted in
// costs() (server/experiment_costs.h).
//
// Thread-safety: all methods may be called concurrently. Each shard has its
// own mutex; the shard table has a reader/writer mutex taken only to find or
// create a shard.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cost_model.h"
#include "kvlearn/v1/retention.pb.h"
#include "models/learned_model.h"
#include "server/experiment.h"
#include "server/experiment_costs.h"
#include "server/model_swap_record.h"
#include "server/resize_estimates.h"
#include "server/retried_batches.h"
#include "server/shadow_budget.h"

namespace kvlearn {

struct PoolsSnapshot;  // server/pools_snapshot.h

struct NodePoolsOptions {
  std::string policy = "lru";
  std::shared_ptr<const LearnedModel> model;  // for policies that score with one
  // Tokens and KV bytes of blocks whose events do not say (block size, model
  // profile), and the marginal recompute cost of every block.
  // REQUIRES: set.
  std::shared_ptr<const CostModel> cost;
  uint32_t block_size = 512;
  // When set, only `known_nodes` are accepted; other nodes get NOT_FOUND.
  bool strict_nodes = false;
  absl::flat_hash_set<std::string> known_nodes;
  uint32_t max_candidates = 1024;  // per Admit / RankEviction call
  // Requests with an id in flight per pool; one more arrival is
  // RESOURCE_EXHAUSTED (a node that never sends request_finished).
  uint32_t max_requests_in_flight = 65536;
  // Blocks the in-flight requests of one pool pin (counted per request, so a
  // block two requests share counts twice); an arrival that would pin more
  // is RESOURCE_EXHAUSTED.
  uint64_t max_pinned_blocks = uint64_t{1} << 20;
  // A request with an id still in flight when an accepted event of its pool
  // carries a timestamp more than this after its arrival's is released, as
  // if finished (0 = never). The pool's event clock, not the wall clock, so
  // that the start-up replay releases it at the same event.
  int64_t request_timeout_us = int64_t{600} * 1'000'000;
  // Distinct node ids with pools; a call or event that would add one more is
  // RESOURCE_EXHAUSTED.
  uint32_t max_nodes = 4096;
  // Capacity of a pool whose node sent no pool_configured event; 0 = unbounded.
  uint64_t default_pool_bytes = 0;
  // Ghosts a pool remembers at most: blocks not resident (recommended
  // evictions awaiting their block_removed included). Past it the pool is
  // compacted down to at most ghost_blocks / 2, the most recently seen with
  // their ancestors (server/shard_image.h), so a pool's memory is bounded by
  // (resident + ghost_blocks) blocks.
  uint64_t ghost_blocks = uint64_t{1} << 18;
  // Blocks all shadow pools together may remember (server/shadow_pool.h).
  uint64_t shadow_max_blocks = uint64_t{1} << 24;
  // Ghost pools at 0.5x and 2x every pool under its live policy
  // (server/resize_estimates.h), and the blocks they may remember together.
  bool resize_estimates = false;
  uint64_t resize_max_blocks = uint64_t{1} << 24;
};

// The capacity of a pool whose node never said what it holds (nor
// --default-pool-bytes): so large that nothing is ever evicted.
inline constexpr uint64_t kUnboundedPoolBytes = UINT64_MAX / 2;

// What changed in a shard, for /metrics.
struct PoolCounters {
  std::atomic<uint64_t> blocks_tracked{0};
  std::atomic<uint64_t> resident_blocks{0};
  std::atomic<uint64_t> resident_bytes{0};
  std::atomic<uint64_t> shards{0};
  // Pools whose policy refused its own saved state at a restore or a
  // compaction, and restarted from their residents (server/shard_image.h).
  std::atomic<uint64_t> policy_states_refused{0};
  // Blocks that left a pool because the node removed one of their ancestors
  // (the engine's word: a block without its prefix is unreachable).
  std::atomic<uint64_t> removed_descendants{0};
  // The bounds of NodePoolsOptions: nodes with pools, and what was refused
  // or released at each bound (start-up replay included).
  std::atomic<uint64_t> nodes{0};
  std::atomic<uint64_t> nodes_refused{0};
  std::atomic<uint64_t> requests_refused_in_flight{0};
  std::atomic<uint64_t> requests_refused_pinned_blocks{0};
  std::atomic<uint64_t> requests_expired{0};
  // Events, calls and batches refused for a string field over
  // kMaxStringFieldBytes (server/request_validation.h).
  std::atomic<uint64_t> string_fields_refused{0};
};

class NodePools {
 public:
  explicit NodePools(NodePoolsOptions options);
  ~NodePools();

  const std::string& policy_name() const { return options_.policy; }
  const NodePoolsOptions& options() const { return options_; }

  // OK if `options.policy` can be built (fails early, at start-up).
  static absl::Status CheckOptions(const NodePoolsOptions& options);

  // Checks the fields of one event and applies it to its shard. Errors name
  // the field ("block_stored.bytes: ...") and carry the gRPC-mappable code.
  // `shard_events`, when given and the event reached a shard, gets the number
  // of events that shard has applied (this one included if accepted).
  absl::Status Apply(const v1::Event& event, uint64_t* shard_events = nullptr);

  absl::StatusOr<v1::AdmitResponse> Admit(const v1::AdmitRequest& request);
  absl::StatusOr<v1::RankResponse> RankEviction(const v1::RankRequest& request);
  void FillStatus(v1::GetStatusResponse& response) const;

  // Hands `model` to every shard's policy, each under its shard's lock. A
  // throwaway policy of the same kind is asked first, so a policy without a
  // model (lru, ...) refuses before anything changes; all shards run the same
  // policy kind, so they then all accept.
  //
  // With a journal set, the swap is journaled first (a model-swap record:
  // `path`, the model's version and every pool's event count at that point,
  // all pools held meanwhile), so a restart swaps at the same place of every
  // pool's history; a journal error leaves the old model in place.
  absl::Status SwapModel(std::shared_ptr<const LearnedModel> model, std::string_view path = {});
  // For the start-up replay: swaps one pool's model (no journal; nothing if
  // the pool does not exist), and the model pools created from now on get.
  absl::Status SwapPoolModel(const std::string& node, v1::Tier tier,
                             std::shared_ptr<const LearnedModel> model);
  void SetModelForNewPools(std::shared_ptr<const LearnedModel> model);

  const PoolCounters& counters() const { return counters_; }

  // Runs `experiment` from now on (its policies' models loaded): every
  // pool's arm is looked up again. A pool whose arm keeps its policy and
  // model keeps its state; one whose policy or model changes starts the new
  // policy on the blocks it holds, inserted root first and then hit once each
  // in the old policy's eviction order (the approximate rebuild of
  // server/shard_image.h). Shadows whose name, policy and model are unchanged
  // keep their pools; new ones start empty. Fails, changing nothing, when a
  // policy cannot be built with its model or is an offline oracle.
  absl::Status SetExperiment(std::shared_ptr<const Experiment> experiment);
  std::shared_ptr<const Experiment> experiment() const;
  // Whether SetExperiment was called (a file runs, not the single arm).
  bool runs_experiment() const;
  const ExperimentCosts& costs() const { return costs_; }
  // The resize estimates (empty unless options().resize_estimates).
  const ResizeEstimates& resize_estimates() const { return resize_; }

  // The batch ids applied so far (server/retried_batches.h); Apply of a
  // batch_received event remembers one.
  RetriedBatches& retried_batches() { return retried_batches_; }
  // retried_batches().Claim(batch), with a source over the string cap
  // counted in counters().string_fields_refused.
  absl::StatusOr<bool> ClaimBatch(const v1::EventBatch& batch);
  // Events accepted by Apply since this object was built.
  uint64_t events_accepted() const { return accepted_.load(std::memory_order_acquire); }
  // Counts a record a stream logs without applying it here (the
  // batch_received marker of a batch it claimed itself), so the accepted and
  // logged counts meet again once its batch is in the log. Call it before
  // the append, as events are applied before theirs.
  void CountLoggedWithoutApply() { accepted_.fetch_add(1, std::memory_order_acq_rel); }
  // Holds every pool and, if `ready()` (called with them held, so no event
  // or decision is applied meanwhile) returns true, captures them all into
  // `out` (every remembered block kept) with the last journaled model swap.
  // Returns whether it captured.
  bool CaptureAll(const std::function<bool()>& ready, PoolsSnapshot* out);
  // Creates the snapshot's pools (REQUIRES: none exists yet), each rebuilt
  // from its image with a fresh policy (server/shard_image.h) scoring with
  // the model pools get now (SetModelForNewPools). A pool whose policy
  // refuses its saved state restarts from its residents (counted in
  // policy_states_refused); `note`, when given, gets a line naming each.
  absl::Status RestoreAll(const PoolsSnapshot& snapshot, std::string* note = nullptr);
  // One node's pools, for a replica group's snapshots kept in JetStream
  // (server/node_snapshot_store.h): whether `node` has a pool of any tier;
  // its pools captured as CaptureAll does (each under its own lock, no model
  // swap record); and its pools created from `snapshot` as RestoreAll does,
  // leaving the model swap record alone. REQUIRES for RestoreNode: every
  // pool of `snapshot` is of one node that has none yet.
  bool HasNode(const std::string& node) const;
  void CaptureNode(const std::string& node, PoolsSnapshot* out);
  absl::Status RestoreNode(const PoolsSnapshot& snapshot, std::string* note = nullptr);
  // For the start-up replay: the model-swap record redone last, which the
  // next snapshot carries.
  void NoteModelSwap(std::string record);

  // Where Admit and RankEviction journal themselves (see above); a journal
  // error fails the call with that error. Set it before calls arrive and
  // after the start-up replay (RedoDecision must not journal again).
  using DecisionJournal = std::function<absl::Status(std::string_view record)>;
  void SetDecisionJournal(DecisionJournal journal) { journal_ = std::move(journal); }

  // Runs a journaled decision again; its status is the call's (errors are
  // expected where the original call failed too).
  absl::Status RedoDecision(std::string_view record);
  // The pool a record is about and the number of events that pool had
  // applied when it was journaled.
  static absl::Status DecisionShard(std::string_view record, std::string* node, v1::Tier* tier,
                                    uint64_t* shard_events);
  // Events the (node, tier) pool has applied; 0 for a pool not seen yet.
  uint64_t EventsApplied(const std::string& node, v1::Tier tier) const;
  // A (node, tier) pool's identity; TIER_UNSPECIFIED is TIER_POOL.
  static std::string ShardKey(const std::string& node, v1::Tier tier);

  // One (node, tier); defined in node_pools.cc.
  struct Shard;

 private:
  // Counts `status` in counters_.string_fields_refused if it refuses a
  // string over the cap; returns it.
  absl::Status CountRefusal(absl::Status status);
  // The (node, tier) pool, or nullptr when it does not exist.
  Shard* Find(const std::string& node, v1::Tier tier) const;
  // Runs `fn` on the (node, tier) pool under its lock. A pool that does not
  // exist yet is created for the call and kept only if `fn` succeeds.
  absl::Status WithShard(const std::string& node, v1::Tier tier, const std::string& field,
                         const std::function<absl::Status(Shard&)>& fn);
  // RestoreAll's pools, without the model swap record.
  absl::Status RestorePools(const PoolsSnapshot& snapshot, std::string* note);
  // REQUIRES: s.mu held.
  // Every pool, in key order (the one order anyone holds several in), each
  // locked. REQUIRES: create_mu_ held, so no pool appears meanwhile.
  std::vector<Shard*> LockAllPools();
  static void UnlockAllPools(const std::vector<Shard*>& shards);
  // Compacts `s` (server/shard_image.h) when its ghosts pass
  // options_.ghost_blocks; CompactLocked does it unconditionally, keeping
  // ghost_blocks / 2 ghosts. REQUIRES: s.mu held.
  void CompactIfOverLocked(Shard& s);
  void CompactLocked(Shard& s);
  absl::StatusOr<v1::AdmitResponse> AdmitLocked(Shard& s, const v1::AdmitRequest& request);
  absl::StatusOr<v1::RankResponse> RankEvictionLocked(Shard& s, const v1::RankRequest& request);
  // REQUIRES: s.mu held.
  absl::Status ApplyLocked(Shard& s, const v1::Event& e);
  // Releases the requests in flight longer than the timeout at `now_us`
  // (options_.request_timeout_us). REQUIRES: s.mu held.
  void ExpireRequestsLocked(Shard& s, int64_t now_us);
  // REQUIRES: s.mu held. Journals `request` when a journal is set.
  absl::Status JournalLocked(char kind, const Shard& s, const google::protobuf::Message& request);
  // Gives `s` its arm of `x` and its shadows; `started` says whether its
  // policy runs already (else it is started). REQUIRES: s.mu held.
  absl::Status JoinExperimentLocked(Shard& s, const Experiment& x, bool started);
  // Charges the request `s` is serving to its arm, if any. REQUIRES: s.mu held.
  void CloseTallyLocked(Shard& s);

  NodePoolsOptions options_;
  DecisionJournal journal_;
  PoolCounters counters_;
  RetriedBatches retried_batches_;
  ExperimentCosts costs_;
  ShadowBudget shadow_budget_;
  ResizeEstimates resize_{options_.resize_max_blocks};  // outlives the pools' ghosts
  absl::Mutex create_mu_;  // held while a new pool is tried (WithShard)
  std::atomic<uint64_t> accepted_{0};
  std::string last_model_swap_ ABSL_GUARDED_BY(create_mu_);
  mutable absl::Mutex table_mu_;
  absl::flat_hash_map<std::pair<std::string, int>, std::unique_ptr<Shard>> shards_
      ABSL_GUARDED_BY(table_mu_);
  // Pools per node id: the nodes options_.max_nodes bounds.
  absl::flat_hash_map<std::string, uint32_t> pools_of_node_ ABSL_GUARDED_BY(table_mu_);
  std::shared_ptr<const Experiment> experiment_ ABSL_GUARDED_BY(table_mu_);
  bool experiment_set_ ABSL_GUARDED_BY(table_mu_) = false;
  // Adds `shard` to the table. REQUIRES: table_mu_ held for writing.
  void InsertShardLocked(std::unique_ptr<Shard> shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_mu_);
};

}  // namespace kvlearn
