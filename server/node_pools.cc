#include "server/node_pools.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/varint.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "server/node_shard.h"
#include "server/pools_snapshot.h"
#include "server/request_validation.h"
#include "server/shadow_pool.h"
#include "server/shard_image.h"

namespace kvlearn {

namespace {

using v1::Event;

// The environment of a (node, tier) pool's policy. A node's HBM and DRAM
// keep what it computed without moving bytes over the pool link, so
// admission there costs no transfer (as in the cluster simulator's tiers).
PolicyEnv ShardEnv(const CostModel& cost, std::shared_ptr<const LearnedModel> model,
                   v1::Tier tier) {
  PolicyEnv env = MakePolicyEnv(cost, std::move(model));
  env.admission_moves_bytes = tier != v1::TIER_HBM && tier != v1::TIER_DRAM;
  return env;
}

// Capacity of a pool whose node never said (see the header).
constexpr uint64_t kUnbounded = kUnboundedPoolBytes;

v1::Tier NormalTier(v1::Tier tier) { return tier == v1::TIER_UNSPECIFIED ? v1::TIER_POOL : tier; }

std::string ShardName(const std::string& node, v1::Tier tier) {
  return absl::StrCat("node '", node, "' tier ", v1::Tier_Name(tier));
}

constexpr char kAdmitRecord = 'A';
constexpr char kRankRecord = 'R';

// Splits a decision record into kind, shard event count and request bytes.
absl::Status SplitRecord(std::string_view record, char* kind, uint64_t* shard_events,
                         std::string_view* request) {
  const auto bad = [] { return absl::DataLossError("decision record is malformed"); };
  if (record.empty()) return bad();
  *kind = record[0];
  if (*kind != kAdmitRecord && *kind != kRankRecord) return bad();
  uint64_t n = 0;
  size_t i = 1;
  for (int shift = 0;; shift += 7) {
    if (i >= record.size() || shift > 63) return bad();
    const auto b = static_cast<unsigned char>(record[i++]);
    n |= uint64_t{b & 0x7fu} << shift;
    if (b < 0x80) break;
  }
  *shard_events = n;
  *request = record.substr(i);
  return absl::OkStatus();
}

// Whether two models are the same file's (their version is its fingerprint).
bool SameModel(const std::shared_ptr<const LearnedModel>& a,
               const std::shared_ptr<const LearnedModel>& b) {
  return a == b || (a != nullptr && b != nullptr && a->version() == b->version());
}

// OK if `policy` can serve in a sidecar with `model` (an offline oracle
// cannot: it needs the future of a trace). `field`, when given, starts the
// error.
absl::Status CheckServingPolicy(const std::string& field, const std::string& policy,
                                const std::shared_ptr<const LearnedModel>& model,
                                const CostModel& cost) {
  const auto named = [&](const absl::Status& st) {
    if (field.empty()) return st;
    return absl::Status(st.code(), absl::StrCat(field, ": ", st.message()));
  };
  if (auto st = CheckPolicyName(policy); !st.ok()) return named(st);
  if (IsOfflinePolicy(policy)) {
    return named(absl::InvalidArgumentError(absl::StrCat(
        "policy '", policy, "' is an offline oracle: it needs the future of a trace")));
  }
  BlockCatalog catalog;
  PolicyDriver probe(&catalog, 1);
  if (auto st = probe.StartPolicy(policy, MakePolicyEnv(cost, model)); !st.ok()) return named(st);
  return absl::OkStatus();
}

AccessInfo Access(const NodePools::Shard& s, int64_t timestamp_us) {
  AccessInfo a;
  a.time_ms = timestamp_us / 1000;
  a.request = s.current_request;
  return a;
}

}  // namespace

NodePools::NodePools(NodePoolsOptions options)
    : options_(std::move(options)),
      experiment_(
          std::make_shared<Experiment>(SingleArmExperiment(options_.policy, options_.model))) {
  shadow_budget_.max_blocks = options_.shadow_max_blocks;
}
NodePools::~NodePools() = default;

absl::Status NodePools::CheckOptions(const NodePoolsOptions& options) {
  if (options.cost == nullptr) return absl::InvalidArgumentError("no cost model");
  if (options.block_size == 0) return absl::InvalidArgumentError("--block-size must be > 0");
  return CheckServingPolicy("", options.policy, options.model, *options.cost);
}

std::shared_ptr<const Experiment> NodePools::experiment() const {
  absl::ReaderMutexLock lock(&table_mu_);
  return experiment_;
}

bool NodePools::runs_experiment() const {
  absl::ReaderMutexLock lock(&table_mu_);
  return experiment_set_;
}

absl::Status NodePools::JoinExperimentLocked(Shard& s, const Experiment& x, bool started) {
  const ExperimentArm& arm = x.arms[x.ArmOf(s.node)];
  const PolicyEnv env = ShardEnv(*options_.cost, arm.loaded_model, s.tier);
  if (!started) {
    if (auto st = s.driver.StartPolicy(arm.policy, env); !st.ok()) return st;
    s.policy = arm.policy;
    s.model = arm.loaded_model;
  } else if (s.policy != arm.policy || !SameModel(s.model, arm.loaded_model)) {
    // The new policy on the blocks the node holds, in the old one's
    // eviction order (its saved state would mean nothing to another policy).
    const ShardImage image = CaptureShard(s, SIZE_MAX, /*policy_state=*/false);
    if (auto st = s.driver.StartPolicy(arm.policy, env); !st.ok()) return st;
    if (auto st = RestoreShard(s, image, *options_.cost, options_.block_size, env); !st.ok()) {
      return st;
    }
    s.policy = arm.policy;
    s.model = arm.loaded_model;
  }
  s.arm = arm.name;
  s.arm_costs = costs_.Arm(arm.name);
  std::vector<std::unique_ptr<ShadowPool>> shadows;
  for (const ExperimentPolicy& spec : x.shadows) {
    CostCounters* costs = costs_.Shadow(spec.name, arm.name);
    auto kept = std::find_if(s.shadows.begin(), s.shadows.end(), [&](const auto& p) {
      return p != nullptr && p->name() == spec.name && p->policy() == spec.policy &&
             SameModel(p->model(), spec.loaded_model);
    });
    if (kept != s.shadows.end()) {
      (*kept)->set_costs(costs);
      shadows.push_back(std::move(*kept));
      continue;
    }
    auto shadow = ShadowPool::Start(spec, s.node, s.tier, s.driver.pool().capacity_bytes(),
                                    ShardEnv(*options_.cost, spec.loaded_model, s.tier), costs,
                                    &shadow_budget_);
    if (!shadow.ok()) return shadow.status();
    shadows.push_back(*std::move(shadow));
  }
  s.shadows = std::move(shadows);
  return absl::OkStatus();
}

absl::Status NodePools::SetExperiment(std::shared_ptr<const Experiment> x) {
  for (size_t i = 0; i < x->arms.size(); ++i) {
    const ExperimentArm& a = x->arms[i];
    if (auto st = CheckServingPolicy(absl::StrCat("arms[", i, "].policy"), a.policy, a.loaded_model,
                                     *options_.cost);
        !st.ok()) {
      return st;
    }
  }
  for (size_t i = 0; i < x->shadows.size(); ++i) {
    const ExperimentPolicy& p = x->shadows[i];
    if (auto st = CheckServingPolicy(absl::StrCat("shadows[", i, "].policy"), p.policy,
                                     p.loaded_model, *options_.cost);
        !st.ok()) {
      return st;
    }
  }
  // As SwapModel: no pool created meanwhile, every pool held in key order.
  absl::MutexLock creating(&create_mu_);
  const std::vector<Shard*> shards = LockAllPools();
  {
    absl::WriterMutexLock lock(&table_mu_);
    experiment_ = x;
    experiment_set_ = true;
  }
  absl::Status status;
  for (Shard* s : shards) {
    // Checked above, so only a policy that refuses its rebuild fails here.
    if (auto st = JoinExperimentLocked(*s, *x, true); !st.ok() && status.ok()) status = st;
  }
  UnlockAllPools(shards);
  return status;
}

void NodePools::CloseTallyLocked(Shard& s) {
  if (!s.tally_open) return;
  s.tally_open = false;
  s.arm_costs->Charge(*options_.cost, s.tally);
  s.resize_ghosts.ChargeLive(*options_.cost, s.tally);
}

NodePools::Shard* NodePools::Find(const std::string& node, v1::Tier tier) const {
  absl::ReaderMutexLock lock(&table_mu_);
  auto it = shards_.find(std::make_pair(node, static_cast<int>(NormalTier(tier))));
  return it == shards_.end() ? nullptr : it->second.get();
}

absl::Status NodePools::CountRefusal(absl::Status status) {
  if (IsStringFieldTooLong(status)) {
    counters_.string_fields_refused.fetch_add(1, std::memory_order_relaxed);
  }
  return status;
}

absl::StatusOr<bool> NodePools::ClaimBatch(const v1::EventBatch& batch) {
  auto fresh = retried_batches_.Claim(batch);
  if (!fresh.ok()) return CountRefusal(fresh.status());
  return fresh;
}

absl::Status NodePools::WithShard(const std::string& node, v1::Tier tier, const std::string& field,
                                  const std::function<absl::Status(Shard&)>& fn) {
  if (auto s = ValidateNodeId(node, field); !s.ok()) return CountRefusal(std::move(s));
  if (!v1::Tier_IsValid(tier)) {
    return absl::InvalidArgumentError(absl::StrCat("tier: unknown value ", static_cast<int>(tier)));
  }
  tier = NormalTier(tier);
  auto run = [&](Shard& s) {
    absl::MutexLock lock(&s.mu);
    absl::Status st = fn(s);
    CompactIfOverLocked(s);
    return st;
  };
  if (Shard* s = Find(node, tier)) return run(*s);
  if (options_.strict_nodes && !options_.known_nodes.contains(node)) {
    return absl::NotFoundError(
        absl::StrCat(field, ": unknown node '", node, "' (--strict-nodes; known: --nodes)"));
  }
  // A new pool is tried out of sight and kept only if the call is accepted:
  // a refused call leaves no empty pool that a restart would not recreate.
  // Creators take turns (creation is rare), so two calls for one new pool
  // cannot both journal.
  absl::MutexLock creating(&create_mu_);
  if (Shard* s = Find(node, tier)) return run(*s);
  {
    absl::ReaderMutexLock table(&table_mu_);
    if (!pools_of_node_.contains(node) && pools_of_node_.size() >= options_.max_nodes) {
      counters_.nodes_refused.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(
          absl::StrCat(field, ": node '", node, "' would be one more than the ", options_.max_nodes,
                       " nodes the sidecar keeps pools for (--max-nodes)"));
    }
  }
  auto shard = std::make_unique<Shard>(
      node, tier, options_.default_pool_bytes ? options_.default_pool_bytes : kUnbounded);
  {
    absl::MutexLock lock(&shard->mu);
    if (auto st = JoinExperimentLocked(*shard, *experiment(), false); !st.ok()) return st;
    if (auto st = fn(*shard); !st.ok()) return st;
    CompactIfOverLocked(*shard);
  }
  absl::WriterMutexLock lock(&table_mu_);
  InsertShardLocked(std::move(shard));
  return absl::OkStatus();
}

void NodePools::InsertShardLocked(std::unique_ptr<Shard> shard) {
  if (++pools_of_node_[shard->node] == 1) {
    counters_.nodes.store(pools_of_node_.size(), std::memory_order_relaxed);
  }
  auto key = std::make_pair(shard->node, static_cast<int>(NormalTier(shard->tier)));
  shards_[std::move(key)] = std::move(shard);
  counters_.shards.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// Marks `b` as seen now, for the compaction's choice of recent ghosts.
void Touch(NodePools::Shard& s, BlockIndex b) { s.last_seen[b] = ++s.touch_clock; }

// The type a request arrival names, numbered as RequestType numbers it; a
// value this build does not know is another type.
RequestType OriginType(v1::RequestType type) {
  static_assert(static_cast<int>(RequestType::kFile) == v1::REQUEST_TYPE_FILE &&
                static_cast<int>(RequestType::kOther) == v1::REQUEST_TYPE_OTHER &&
                kRequestTypes == v1::REQUEST_TYPE_OTHER + 1);
  return type >= 0 && type < kRequestTypes ? static_cast<RequestType>(type) : RequestType::kOther;
}

// Adds a block to the shard's catalog (or returns the known one, whose
// parent the caller has checked); a block a request arrival names first
// keeps that request's type and turn (`origin`).
BlockIndex AddBlock(NodePools::Shard& s, const CostModel& cost, uint32_t block_size, uint64_t id,
                    BlockIndex parent, uint32_t tokens, uint64_t bytes, PoolCounters& counters,
                    const v1::RequestArrival* origin = nullptr) {
  BlockIndex b = s.catalog.Find(id);
  if (b != kNoBlock) {
    Touch(s, b);
    return b;
  }
  BlockMeta meta;
  meta.hash_id = id;
  meta.parent = parent;
  meta.depth = parent == kNoBlock ? 0 : s.catalog[parent].depth + 1;
  meta.tokens = tokens;
  meta.bytes = bytes;
  meta.recompute_gpu_ms = cost.BlockRecomputeGpuMs(meta.depth, tokens, block_size);
  if (origin != nullptr) {
    meta.origin_type = OriginType(origin->request_type());
    meta.origin_turn = static_cast<uint16_t>(std::min<uint32_t>(origin->turn(), UINT16_MAX));
  }
  b = s.catalog.Add(meta);
  s.last_seen.push_back(0);
  Touch(s, b);
  s.driver.Grow();
  counters.blocks_tracked.fetch_add(1, std::memory_order_relaxed);
  return b;
}

bool InView(const NodePools::Shard& s, BlockIndex b) {
  return s.driver.pool().IsResident(b) || s.proposal_score.contains(b);
}

// Children of b the node holds: in the pool, or proposed.
uint32_t ViewChildren(const NodePools::Shard& s, BlockIndex b) {
  auto it = s.proposed_children.find(b);
  return s.driver.pool().ResidentChildren(b) + (it == s.proposed_children.end() ? 0 : it->second);
}

void InsertInView(NodePools::Shard& s, BlockIndex b, const AccessInfo& access,
                  PoolCounters& counters) {
  s.driver.Insert(b, access);
  counters.resident_blocks.fetch_add(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_add(s.catalog[b].bytes, std::memory_order_relaxed);
}

// The node no longer holds b (it was in the view).
void LeaveView(NodePools::Shard& s, BlockIndex b, PoolCounters& counters) {
  ++s.removals;
  Touch(s, b);  // a ghost now: the compaction keeps the recently removed
  counters.resident_blocks.fetch_sub(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_sub(s.catalog[b].bytes, std::memory_order_relaxed);
}

// Brings the shard's children lists up to the catalog's size.
void LinkChildren(NodePools::Shard& s) {
  const size_t n = s.catalog.size();
  s.first_child.resize(n, kNoBlock);
  s.next_sibling.resize(n, kNoBlock);
  for (; s.linked < n; ++s.linked) {
    const auto b = static_cast<BlockIndex>(s.linked);
    if (const BlockIndex parent = s.catalog[b].parent; parent != kNoBlock) {
      s.next_sibling[b] = s.first_child[parent];
      s.first_child[parent] = b;
    }
  }
}

// Every descendant of b that the view holds, each after its ancestors (the
// view is prefix-closed: a block outside it has none inside).
std::vector<BlockIndex> ViewDescendants(NodePools::Shard& s, BlockIndex b) {
  LinkChildren(s);
  std::vector<BlockIndex> out;
  std::vector<BlockIndex> stack = {b};
  while (!stack.empty()) {
    const BlockIndex x = stack.back();
    stack.pop_back();
    for (BlockIndex c = s.first_child[x]; c != kNoBlock; c = s.next_sibling[c]) {
      if (InView(s, c)) {
        out.push_back(c);
        stack.push_back(c);
      }
    }
  }
  return out;
}

// Forgets proposal b (confirmed or withdrawn); the caller updates the pool.
void DropProposal(NodePools::Shard& s, BlockIndex b) {
  const auto it = s.proposal_score.find(b);
  s.proposals.erase(it->second.order);
  s.proposal_score.erase(it);
  s.proposed_bytes -= s.catalog[b].bytes;
  const BlockIndex parent = s.catalog[b].parent;
  if (parent != kNoBlock) {
    auto it = s.proposed_children.find(parent);
    if (--it->second == 0) s.proposed_children.erase(it);
  }
}

// RankEviction's victim b leaves the policy's pool, not the view.
// REQUIRES: pool().IsEvictable(b).
void Propose(NodePools::Shard& s, BlockIndex b, double score) {
  s.driver.EvictLeaf(b);
  s.AddProposal(b, score);
}

// The node keeps proposal b after all (it used or stored it again): b and
// its proposed ancestors go back into the policy's pool, root first, as
// fresh inserts (the policy forgot them when they were proposed).
void Withdraw(NodePools::Shard& s, BlockIndex b, const AccessInfo& access) {
  absl::InlinedVector<BlockIndex, 8> back;
  for (BlockIndex x = b; x != kNoBlock && s.proposal_score.contains(x); x = s.catalog[x].parent) {
    back.push_back(x);
  }
  for (auto it = back.rbegin(); it != back.rend(); ++it) {
    DropProposal(s, *it);
    s.driver.Insert(*it, access);
  }
}

// Takes the tokens and bytes the node reports for b, unless the view holds
// b already (its pool counts the bytes it was stored with).
void TakeSize(NodePools::Shard& s, const CostModel& cost, uint32_t block_size, BlockIndex b,
              int64_t tokens, int64_t bytes) {
  const BlockMeta& m = s.catalog[b];
  if (InView(s, b) || (m.tokens == tokens && m.bytes == static_cast<uint64_t>(bytes))) return;
  s.catalog.Resize(b, static_cast<uint32_t>(tokens), static_cast<uint64_t>(bytes),
                   cost.BlockRecomputeGpuMs(m.depth, static_cast<uint64_t>(tokens), block_size));
}

}  // namespace

std::string NodePools::ShardKey(const std::string& node, v1::Tier tier) {
  std::string key = node;
  key.push_back('\0');  // node ids never hold one
  absl::StrAppend(&key, static_cast<int>(NormalTier(tier)));
  return key;
}

absl::Status NodePools::Apply(const Event& e, uint64_t* shard_events) {
  // Check what needs no shard first, so a malformed event creates nothing.
  if (auto st = ValidateEvent(e); !st.ok()) return CountRefusal(std::move(st));
  // Accepted (and so logged) like every event, though they touch no pool:
  // snapshots wait for the accepted and logged counts to meet.
  if (e.kind_case() == Event::kTransferFinished) {  // no pool state
    accepted_.fetch_add(1, std::memory_order_acq_rel);
    return absl::OkStatus();
  }
  if (e.kind_case() == Event::kBatchReceived) {
    retried_batches_.Claim(e.batch_received().source(), e.batch_received().batch_id());
    accepted_.fetch_add(1, std::memory_order_acq_rel);
    return absl::OkStatus();
  }
  return WithShard(e.node_id(), e.tier(), "node_id", [&](Shard& s) {
    s.last_timestamp_us = std::max(s.last_timestamp_us, e.timestamp_us());
    absl::Status st = ApplyLocked(s, e);
    if (st.ok()) {
      ++s.events_applied;
      accepted_.fetch_add(1, std::memory_order_acq_rel);
      // By accepted events only, at their own timestamps: the replay sees
      // exactly these, so it releases the same requests at the same events.
      ExpireRequestsLocked(s, e.timestamp_us());
    }
    if (shard_events != nullptr) *shard_events = s.events_applied;
    return st;
  });
}

namespace {

// Ends request `it` of s.requests_in_flight: its chain's pins go.
void EndRequest(NodePools::Shard& s,
                absl::flat_hash_map<std::string, std::vector<BlockIndex>>::iterator it) {
  s.driver.Release(it->second);
  s.held_blocks -= it->second.size();
  const auto arrival = s.request_arrival_us.find(it->first);
  s.requests_by_arrival.erase({arrival->second, it->first});
  s.request_arrival_us.erase(arrival);
  s.requests_in_flight.erase(it);
}

// Whether a request that arrived at `arrival_us` is past `timeout_us` at
// `now_us` (0: no timeout).
bool Expired(int64_t arrival_us, int64_t now_us, int64_t timeout_us) {
  return timeout_us > 0 && now_us - arrival_us > timeout_us;
}

}  // namespace

void NodePools::ExpireRequestsLocked(Shard& s, int64_t now_us) {
  while (!s.requests_by_arrival.empty() &&
         Expired(s.requests_by_arrival.begin()->first, now_us, options_.request_timeout_us)) {
    EndRequest(s, s.requests_in_flight.find(s.requests_by_arrival.begin()->second));
    counters_.requests_expired.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::Status NodePools::JournalLocked(char kind, const Shard& s,
                                      const google::protobuf::Message& request) {
  if (!journal_) return absl::OkStatus();
  std::string record(1, kind);
  PutVarint(record, s.events_applied);
  request.AppendToString(&record);
  return journal_(record);
}

absl::Status NodePools::DecisionShard(std::string_view record, std::string* node, v1::Tier* tier,
                                      uint64_t* shard_events) {
  char kind = 0;
  std::string_view bytes;
  if (auto st = SplitRecord(record, &kind, shard_events, &bytes); !st.ok()) return st;
  v1::AdmitRequest admit;
  v1::RankRequest rank;
  const bool parsed = kind == kAdmitRecord
                          ? admit.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
                          : rank.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  if (!parsed) return absl::DataLossError("decision record: the request does not parse");
  *node = kind == kAdmitRecord ? admit.node_id() : rank.node_id();
  *tier = NormalTier(kind == kAdmitRecord ? admit.tier() : rank.tier());
  return absl::OkStatus();
}

uint64_t NodePools::EventsApplied(const std::string& node, v1::Tier tier) const {
  Shard* s = nullptr;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    auto it = shards_.find(std::make_pair(node, static_cast<int>(NormalTier(tier))));
    if (it == shards_.end()) return 0;
    s = it->second.get();
  }
  absl::MutexLock lock(&s->mu);
  return s->events_applied;
}

absl::Status NodePools::RedoDecision(std::string_view record) {
  char kind = 0;
  uint64_t shard_events = 0;
  std::string_view bytes;
  if (auto st = SplitRecord(record, &kind, &shard_events, &bytes); !st.ok()) return st;
  if (kind == kAdmitRecord) {
    v1::AdmitRequest request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return absl::DataLossError("decision record: the AdmitRequest does not parse");
    }
    return Admit(request).status();
  }
  v1::RankRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("decision record: the RankRequest does not parse");
  }
  return RankEviction(request).status();
}

absl::Status NodePools::ApplyLocked(Shard& s, const Event& e) {
  const CostModel& cost = *options_.cost;
  const uint32_t bs = options_.block_size;

  switch (e.kind_case()) {
    case Event::kRequestArrival: {
      const auto& r = e.request_arrival();
      const int n = r.block_ids_size();
      // One catalog lookup per id: check the known ids' parents, then add
      // the new ones.
      absl::InlinedVector<BlockIndex, 32> chain(n);
      for (int i = 0; i < n; ++i) {
        chain[i] = s.catalog.Find(r.block_ids(i));
        if (chain[i] == kNoBlock) continue;
        const BlockIndex seen = s.catalog[chain[i]].parent;
        const bool same = i == 0 ? seen == kNoBlock : seen != kNoBlock && seen == chain[i - 1];
        if (!same) {
          std::optional<uint64_t> parent;
          if (i > 0) parent = r.block_ids(i - 1);
          return CheckParent(s.catalog, r.block_ids(i), parent,
                             absl::StrCat("request_arrival.block_ids[", i, "]"));
        }
      }
      const std::string& id = r.request_id();
      if (!id.empty()) {
        if (s.requests_in_flight.contains(id)) {
          return absl::AlreadyExistsError(absl::StrCat(
              "request_arrival.request_id: request '", id, "' is already in flight on ",
              ShardName(s.node, s.tier), " (send request_finished first)"));
        }
      }
      // The bounds count what stays after this arrival: the unnamed
      // request's pins end with it, and requests past the timeout at its
      // timestamp are released once it is accepted.
      uint64_t ending_requests = 0;
      uint64_t ending_pins = s.unnamed_request.size();
      for (auto it = s.requests_by_arrival.begin();
           it != s.requests_by_arrival.end() &&
           Expired(it->first, e.timestamp_us(), options_.request_timeout_us);
           ++it) {
        ++ending_requests;
        ending_pins += s.requests_in_flight.at(it->second).size();
      }
      if (!id.empty() &&
          s.requests_in_flight.size() - ending_requests >= options_.max_requests_in_flight) {
        counters_.requests_refused_in_flight.fetch_add(1, std::memory_order_relaxed);
        return absl::ResourceExhaustedError(absl::StrCat(
            "request_arrival.request_id: ", ShardName(s.node, s.tier), " has ",
            s.requests_in_flight.size() - ending_requests,
            " requests in flight, the limit (--max-requests-in-flight; send request_finished "
            "when a request ends)"));
      }
      if (s.held_blocks - ending_pins + static_cast<uint64_t>(n) > options_.max_pinned_blocks) {
        counters_.requests_refused_pinned_blocks.fetch_add(1, std::memory_order_relaxed);
        return absl::ResourceExhaustedError(
            absl::StrCat("request_arrival.block_ids: ", ShardName(s.node, s.tier), " has ",
                         s.held_blocks - ending_pins, " blocks pinned by requests in flight; ", n,
                         " more would pass the limit of ", options_.max_pinned_blocks,
                         " (--max-pinned-blocks; send request_finished when a request ends)"));
      }
      BlockIndex parent = kNoBlock;
      for (int i = 0; i < n; ++i) {
        if (chain[i] == kNoBlock) {
          uint32_t tokens = bs;
          if (!r.block_tokens().empty()) {
            tokens = static_cast<uint32_t>(r.block_tokens(i));
          } else if (r.input_length() > 0) {
            const int64_t left = r.input_length() - int64_t{i} * bs;
            tokens = left <= 0 ? bs : static_cast<uint32_t>(std::min<int64_t>(left, bs));
          }
          const uint64_t bytes =
              r.block_bytes().empty() ? cost.BytesForTokens(tokens) : r.block_bytes(i);
          chain[i] = AddBlock(s, cost, bs, r.block_ids(i), parent, tokens, bytes, counters_, &r);
        }
        parent = chain[i];
        Touch(s, chain[i]);
      }
      const std::span<const BlockIndex> blocks(chain.data(), chain.size());
      s.current_request = s.next_request++;
      ++s.requests;
      // Charged as the pool replay charges a request: what the node held of
      // the chain when it arrived hits (server/experiment_costs.h).
      CloseTallyLocked(s);
      s.tally = RequestTally();
      s.tally.blocks = static_cast<uint32_t>(n);
      for (const BlockIndex b : blocks) {
        if (!InView(s, b)) break;
        ++s.tally.hit_blocks;
        s.tally.hit_tokens += s.catalog[b].tokens;
        s.tally.loaded_bytes += s.catalog[b].bytes;
      }
      uint64_t input_tokens = r.input_length() > 0 ? static_cast<uint64_t>(r.input_length()) : 0;
      if (input_tokens == 0) {
        for (const BlockIndex b : blocks) input_tokens += s.catalog[b].tokens;
      }
      s.tally.input_tokens = std::max(input_tokens, s.tally.hit_tokens);
      s.tally_open = true;
      s.tally_request = id;
      for (auto& shadow : s.shadows) {
        shadow->Serve(s.catalog, blocks, s.tally.input_tokens, e.timestamp_us(), cost, bs,
                      options_.ghost_blocks);
      }
      // A ghost that cannot start (the live policy started, so it should)
      // serves nothing; the estimates then miss this pool's arrivals.
      if (options_.resize_estimates &&
          s.resize_ghosts
              .Follow(
                  s.node, s.tier, s.policy, s.model, s.driver.pool().capacity_bytes(),
                  [&] { return ShardEnv(cost, s.model, s.tier); }, resize_)
              .ok()) {
        s.resize_ghosts.Serve(s.catalog, blocks, s.tally.input_tokens, e.timestamp_us(), cost, bs,
                              options_.ghost_blocks);
      }
      const AccessInfo access = Access(s, e.timestamp_us());
      // Any arrival ends the pins of a request without an id (one request
      // at a time, as before ids existed).
      s.driver.Release(s.unnamed_request);
      s.held_blocks -= s.unnamed_request.size();
      s.unnamed_request.clear();
      if (id.empty()) {
        s.unnamed_request.assign(blocks.begin(), blocks.end());
      } else {
        s.requests_in_flight.emplace(id, std::vector<BlockIndex>(blocks.begin(), blocks.end()));
        s.request_arrival_us.emplace(id, e.timestamp_us());
        s.requests_by_arrival.emplace(e.timestamp_us(), id);
      }
      s.driver.Hold(blocks);
      s.held_blocks += blocks.size();
      // A proposed victim this request needs is one the node keeps.
      if (!s.proposals.empty()) {
        for (const BlockIndex b : blocks) {
          if (s.proposal_score.contains(b)) Withdraw(s, b, access);
        }
      }
      AccessInfo announced = access;
      announced.served_above = r.served_above();  // validated: at most n
      s.driver.AnnounceRequest(blocks, announced);
      return absl::OkStatus();
    }
    case Event::kRequestFinished: {
      const std::string& id = e.request_finished().request_id();
      auto it = s.requests_in_flight.find(id);
      if (it == s.requests_in_flight.end()) {
        return absl::NotFoundError(absl::StrCat("request_finished.request_id: request '", id,
                                                "' is not in flight on ",
                                                ShardName(s.node, s.tier)));
      }
      EndRequest(s, it);
      if (s.tally_open && s.tally_request == id) CloseTallyLocked(s);
      return absl::OkStatus();
    }
    case Event::kBlockHit: {
      const uint64_t id = e.block_hit().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock || !InView(s, b)) {
        return absl::FailedPreconditionError(
            absl::StrCat("block_hit.block_id: block ", id, " is not stored on ",
                         ShardName(s.node, s.tier), " (send block_stored first)"));
      }
      const AccessInfo access = Access(s, e.timestamp_us());
      if (s.proposal_score.contains(b)) Withdraw(s, b, access);
      s.driver.Hit(b, access);
      Touch(s, b);
      return absl::OkStatus();
    }
    case Event::kBlockStored: {
      const auto& st = e.block_stored();
      std::optional<uint64_t> parent_hash;
      if (st.has_parent_id()) parent_hash = st.parent_id();
      if (auto c = CheckParent(s.catalog, st.block_id(), parent_hash, "block_stored.parent_id");
          !c.ok()) {
        return c;
      }
      BlockIndex parent = kNoBlock;
      if (parent_hash) {
        parent = s.catalog.Find(*parent_hash);
        if (parent == kNoBlock || !InView(s, parent)) {
          return absl::FailedPreconditionError(
              absl::StrCat("block_stored.parent_id: parent ", *parent_hash, " of block ",
                           st.block_id(), " is not stored on ", ShardName(s.node, s.tier),
                           " (a block is usable only after its whole prefix)"));
        }
      }
      BlockIndex b =
          AddBlock(s, cost, bs, st.block_id(), parent, static_cast<uint32_t>(st.tokens()),
                   static_cast<uint64_t>(st.bytes()), counters_);
      TakeSize(s, cost, bs, b, st.tokens(), st.bytes());
      const AccessInfo access = Access(s, e.timestamp_us());
      if (s.proposal_score.contains(b)) {
        Withdraw(s, b, access);  // stored again: the node keeps it
      } else if (!s.driver.pool().IsResident(b)) {
        // Its parent may be a proposal the node keeps after all.
        if (parent != kNoBlock && s.proposal_score.contains(parent)) Withdraw(s, parent, access);
        InsertInView(s, b, access, counters_);
        if (s.tally_open) s.tally.admitted_bytes += s.catalog[b].bytes;
      }
      return absl::OkStatus();
    }
    case Event::kBlockRemoved: {
      const uint64_t id = e.block_removed().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock) {
        return absl::NotFoundError(absl::StrCat("block_removed.block_id: block ", id,
                                                " was never seen on ", ShardName(s.node, s.tier)));
      }
      if (!InView(s, b)) return absl::OkStatus();  // already gone
      // The node's word is the truth: with its prefix gone, every
      // descendant it still holds is unreachable to prefix hits (as in the
      // engine), so they leave too, leaves first.
      std::vector<BlockIndex> gone;
      if (ViewChildren(s, b) > 0) gone = ViewDescendants(s, b);
      counters_.removed_descendants.fetch_add(gone.size(), std::memory_order_relaxed);
      gone.insert(gone.begin(), b);
      for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
        if (s.proposal_score.contains(*it)) {
          DropProposal(s, *it);  // confirmed: the policy let it go when proposing it
        } else {
          s.driver.EvictLeaf(*it);
        }
        LeaveView(s, *it, counters_);
      }
      return absl::OkStatus();
    }
    case Event::kPoolConfigured: {
      const auto capacity = static_cast<uint64_t>(e.pool_configured().capacity_bytes());
      if (capacity == s.driver.pool().capacity_bytes()) return absl::OkStatus();
      const uint64_t held = s.driver.pool().resident_blocks() + s.proposals.size();
      if (held > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("pool_configured.capacity_bytes: ", ShardName(s.node, s.tier),
                         " already holds ", held, " blocks (send all_blocks_cleared first)"));
      }
      // Nothing resident: start the pool and its policy afresh at the new size.
      if (auto st = s.driver.Restart(capacity, ShardEnv(*options_.cost, s.model, s.tier));
          !st.ok()) {
        return st;
      }
      s.HoldInFlight();
      for (auto& shadow : s.shadows) shadow->Restart(capacity);
      s.resize_ghosts.Restart(capacity);
      return absl::OkStatus();
    }
    case Event::kAllBlocksCleared: {
      for (const auto& [order, b] : s.proposals) LeaveView(s, b, counters_);
      s.proposals.clear();
      s.proposal_score.clear();
      s.proposed_children.clear();
      s.proposed_bytes = 0;
      // A child always has a larger index than its parent: evicting in
      // decreasing index order only ever evicts leaves.
      for (BlockIndex b = static_cast<BlockIndex>(s.catalog.size()); b-- > 0;) {
        if (s.driver.pool().IsResident(b)) {
          s.driver.EvictLeaf(b);
          LeaveView(s, b, counters_);
        }
      }
      // Everything just became a ghost: keep at most the compaction's share.
      CompactLocked(s);
      // The node lost its cache (a restart, say): so would have the shadows.
      for (auto& shadow : s.shadows) shadow->Restart(s.driver.pool().capacity_bytes());
      s.resize_ghosts.Restart(s.driver.pool().capacity_bytes());
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<v1::AdmitResponse> NodePools::Admit(const v1::AdmitRequest& request) {
  if (auto st = ValidateAdmitRequest(request, options_.max_candidates); !st.ok()) return st;
  absl::StatusOr<v1::AdmitResponse> out;
  if (auto st = WithShard(request.node_id(), request.tier(), "node_id",
                          [&](Shard& s) { return (out = AdmitLocked(s, request)).status(); });
      !st.ok()) {
    return st;
  }
  return out;
}

absl::StatusOr<v1::AdmitResponse> NodePools::AdmitLocked(Shard& s,
                                                         const v1::AdmitRequest& request) {
  const int n = request.candidates_size();
  const auto& first = request.candidates(0);
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    std::optional<uint64_t> parent_hash;
    if (c.has_parent_id()) parent_hash = c.parent_id();
    if (auto st = CheckParent(s.catalog, c.block_id(), parent_hash,
                              absl::StrCat("candidates[", i, "].parent_id"));
        !st.ok()) {
      return st;
    }
  }
  BlockIndex parent = kNoBlock;
  if (first.has_parent_id()) {
    parent = s.catalog.Find(first.parent_id());
    if (parent == kNoBlock) {
      return absl::FailedPreconditionError(absl::StrCat("candidates[0].parent_id: block ",
                                                        first.parent_id(), " was never seen on ",
                                                        ShardName(s.node, s.tier)));
    }
  }
  // A candidate whose parent is not stored could only become an orphan.
  bool admitting = parent == kNoBlock || InView(s, parent);
  const AccessInfo access = Access(s, request.timestamp_us());
  v1::AdmitResponse response;
  response.set_policy(s.policy);
  response.set_arm(s.arm);
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    const BlockIndex b =
        AddBlock(s, *options_.cost, options_.block_size, c.block_id(), parent,
                 static_cast<uint32_t>(c.tokens()), static_cast<uint64_t>(c.bytes()), counters_);
    TakeSize(s, *options_.cost, options_.block_size, b, c.tokens(), c.bytes());
    parent = b;
    if (admitting && !InView(s, b)) admitting = s.driver.ShouldAdmit(b, access);
    auto* d = response.add_decisions();
    d->set_block_id(c.block_id());
    d->set_keep(admitting);
    d->set_score(s.driver.policy().AdmissionScore(b, admitting));
  }
  // Before the answer leaves: an answer the node saw is always redone after
  // a restart (and a call that failed here is as if never made).
  if (auto st = JournalLocked(kAdmitRecord, s, request); !st.ok()) return st;
  return response;
}

absl::StatusOr<v1::RankResponse> NodePools::RankEviction(const v1::RankRequest& request) {
  if (auto st = ValidateRankRequest(request, options_.max_candidates); !st.ok()) return st;
  absl::StatusOr<v1::RankResponse> out;
  if (auto st =
          WithShard(request.node_id(), request.tier(), "node_id",
                    [&](Shard& s) { return (out = RankEvictionLocked(s, request)).status(); });
      !st.ok()) {
    return st;
  }
  return out;
}

absl::StatusOr<v1::RankResponse> NodePools::RankEvictionLocked(Shard& s,
                                                               const v1::RankRequest& request) {
  const auto want = static_cast<uint64_t>(request.bytes_to_free());
  uint64_t freed = 0;
  v1::RankResponse response;
  response.set_policy(s.policy);
  response.set_arm(s.arm);
  auto answer = [&](BlockIndex b, double score) {
    auto* v = response.add_victims();
    v->set_block_id(s.catalog[b].hash_id);
    v->set_bytes(static_cast<int64_t>(s.catalog[b].bytes));
    v->set_score(score);
    freed += s.catalog[b].bytes;
  };
  auto propose = [&](BlockIndex b) {
    const double score = s.driver.EvictionPriority(b);
    answer(b, score);
    Propose(s, b, score);
  };

  std::vector<BlockIndex> candidates;
  if (!request.candidate_ids().empty()) {
    const std::span<const uint64_t> ids(request.candidate_ids().data(),
                                        static_cast<size_t>(request.candidate_ids_size()));
    std::vector<BlockIndex> found(ids.size());
    s.catalog.FindAll(ids, found);
    candidates.reserve(ids.size());
    for (int i = 0; i < request.candidate_ids_size(); ++i) {
      const uint64_t id = request.candidate_ids(i);
      const BlockIndex b = found[static_cast<size_t>(i)];
      if (b == kNoBlock) {
        return absl::NotFoundError(absl::StrCat("candidate_ids[", i, "]: block ", id,
                                                " was never seen on ", ShardName(s.node, s.tier)));
      }
      if (InView(s, b)) candidates.push_back(b);
    }
    std::sort(candidates.begin(), candidates.end());  // drop repeats, cheaply for small lists
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  }
  // Victims proposed before and not confirmed yet come first: the node may
  // not have applied (or even received) that answer.
  if (candidates.empty()) {
    for (const auto& [order, b] : s.proposals) {
      if (freed >= want) break;
      answer(b, s.proposal_score.at(b).score);
    }
  } else {
    // The candidates proposed before, in the order they were proposed. A
    // proposal has left the policy's pool, so only the candidates outside it
    // are looked up (with many proposals outstanding, each lookup is a cache
    // miss).
    std::vector<std::pair<uint64_t, BlockIndex>> again;
    for (const BlockIndex b : candidates) {
      if (s.driver.pool().IsResident(b)) continue;
      if (auto it = s.proposal_score.find(b); it != s.proposal_score.end()) {
        again.emplace_back(it->second.order, b);
      }
    }
    std::sort(again.begin(), again.end());
    for (const auto& [order, b] : again) {
      if (freed >= want) break;
      answer(b, s.proposal_score.at(b).score);
    }
  }

  // Asking for victims may change the policy (s3fifo's lazy promotions) even
  // when it fails: journal whatever happened once the input was accepted.
  absl::Status failed;
  if (request.candidate_ids().empty()) {
    while (freed < want) {
      auto victim = s.driver.NextVictim();
      if (!victim.ok()) {
        failed = victim.status();
        break;
      }
      if (*victim == kNoBlock) break;
      propose(*victim);
    }
  } else if (freed < want) {
    std::vector<BlockIndex> resident;
    for (const BlockIndex b : candidates) {
      if (s.driver.pool().IsResident(b)) resident.push_back(b);
    }
    std::vector<BlockIndex> order = s.driver.FirstVictims(resident, want - freed);
    // Proposing a leaf can make its parent a leaf: sweep until nothing changes.
    bool progress = true;
    while (freed < want && progress) {
      progress = false;
      for (BlockIndex b : order) {
        if (freed >= want) break;
        if (s.driver.pool().IsEvictable(b)) {
          propose(b);
          progress = true;
        }
      }
    }
  }
  if (auto st = JournalLocked(kRankRecord, s, request); !st.ok()) return st;
  if (!failed.ok()) return failed;
  response.set_bytes_freed(static_cast<int64_t>(freed));
  return response;
}

void NodePools::FillStatus(v1::GetStatusResponse& response) const {
  std::vector<Shard*> shards;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    for (const auto& [key, shard] : shards_) shards.push_back(shard.get());
  }
  std::sort(shards.begin(), shards.end(), [](const Shard* a, const Shard* b) {
    return std::tie(a->node, a->tier) < std::tie(b->node, b->tier);
  });
  for (Shard* s : shards) {
    absl::MutexLock lock(&s->mu);
    auto* p = response.add_pools();
    p->set_node_id(s->node);
    p->set_tier(s->tier);
    p->set_blocks_tracked(s->catalog.size());
    p->set_resident_blocks(s->driver.pool().resident_blocks() + s->proposals.size());
    p->set_resident_bytes(s->driver.pool().used_bytes() + s->proposed_bytes);
    p->set_requests(s->requests);
    p->set_evictions(s->removals);
    p->set_requests_in_flight(s->requests_in_flight.size());
    p->set_proposed_blocks(s->proposals.size());
    p->set_arm(s->arm);
    p->set_policy(s->policy);
  }
}

absl::Status NodePools::SwapModel(std::shared_ptr<const LearnedModel> model,
                                  std::string_view path) {
  if (runs_experiment()) {
    return absl::FailedPreconditionError(
        "this sidecar runs an experiment: its arms name their models (reload the experiment)");
  }
  {
    // Ask a throwaway policy first, so a policy without a model refuses even
    // before any node has shown up.
    std::shared_ptr<const LearnedModel> current;
    {
      absl::ReaderMutexLock lock(&table_mu_);
      current = options_.model;
    }
    BlockCatalog catalog;
    PolicyDriver probe(&catalog, 1);
    if (auto st = probe.StartPolicy(options_.policy, MakePolicyEnv(*options_.cost, current));
        !st.ok()) {
      return st;
    }
    if (auto st = probe.policy().SwapModel(model); !st.ok()) return st;
  }
  // Every pool changes model at one point of its history, the one the
  // journal records: no pool is created meanwhile (create_mu_) and every
  // pool is held (in key order, the one order anyone takes several in).
  absl::MutexLock creating(&create_mu_);
  const std::vector<Shard*> shards = LockAllPools();
  absl::Status status;
  if (journal_) {
    ModelSwapRecord swap;
    swap.path = std::string(path);
    swap.version = model->version();
    for (const Shard* s : shards) swap.pools.push_back({s->node, s->tier, s->events_applied});
    const std::string record = EncodeModelSwap(swap);
    status = journal_(record);
    if (status.ok()) last_model_swap_ = record;
  }
  for (Shard* s : shards) {
    if (status.ok()) status = s->driver.policy().SwapModel(model);
    if (status.ok()) s->model = model;
  }
  // Before the pools are released: a pool rebuilt (compaction) right after
  // must not start from the old model.
  if (status.ok()) SetModelForNewPools(model);
  UnlockAllPools(shards);
  return status;
}

void NodePools::SetModelForNewPools(std::shared_ptr<const LearnedModel> model) {
  absl::WriterMutexLock lock(&table_mu_);
  options_.model = std::move(model);
  if (!experiment_set_) {
    experiment_ =
        std::make_shared<Experiment>(SingleArmExperiment(options_.policy, options_.model));
  }
}

absl::Status NodePools::SwapPoolModel(const std::string& node, v1::Tier tier,
                                      std::shared_ptr<const LearnedModel> model) {
  Shard* s = Find(node, tier);
  if (s == nullptr) return absl::OkStatus();  // it never got an event here
  absl::MutexLock lock(&s->mu);
  if (auto st = s->driver.policy().SwapModel(model); !st.ok()) return st;
  s->model = std::move(model);
  return absl::OkStatus();
}

std::vector<NodePools::Shard*> NodePools::LockAllPools() {
  std::vector<Shard*> shards;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    for (const auto& [key, shard] : shards_) shards.push_back(shard.get());
  }
  std::sort(shards.begin(), shards.end(), [](const Shard* a, const Shard* b) {
    return std::tie(a->node, a->tier) < std::tie(b->node, b->tier);
  });
  for (Shard* s : shards) s->mu.Lock();
  return shards;
}

void NodePools::UnlockAllPools(const std::vector<Shard*>& shards) {
  for (auto it = shards.rbegin(); it != shards.rend(); ++it) (*it)->mu.Unlock();
}

void NodePools::NoteModelSwap(std::string record) {
  absl::MutexLock lock(&create_mu_);
  last_model_swap_ = std::move(record);
}

bool NodePools::CaptureAll(const std::function<bool()>& ready, PoolsSnapshot* out) {
  // As SwapModel: no pool created meanwhile, every pool held in key order.
  absl::MutexLock creating(&create_mu_);
  const std::vector<Shard*> shards = LockAllPools();
  const bool captured = ready();
  if (captured) {
    out->model_swap = last_model_swap_;
    out->pools.clear();
    for (const Shard* s : shards) {
      out->pools.push_back({s->node, s->tier, CaptureShard(*s, SIZE_MAX)});
    }
  }
  UnlockAllPools(shards);
  return captured;
}

bool NodePools::HasNode(const std::string& node) const {
  absl::ReaderMutexLock lock(&table_mu_);
  return pools_of_node_.contains(node);
}

void NodePools::CaptureNode(const std::string& node, PoolsSnapshot* out) {
  std::vector<Shard*> shards;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    for (const auto& [key, shard] : shards_) {
      if (key.first == node) shards.push_back(shard.get());
    }
  }
  // Pools are never removed, so the pointers stay valid unlocked.
  std::sort(shards.begin(), shards.end(),
            [](const Shard* a, const Shard* b) { return a->tier < b->tier; });
  out->model_swap.clear();
  out->pools.clear();
  for (Shard* s : shards) {
    absl::MutexLock lock(&s->mu);
    out->pools.push_back({s->node, s->tier, CaptureShard(*s, SIZE_MAX)});
  }
}

absl::Status NodePools::RestoreNode(const PoolsSnapshot& snapshot, std::string* note) {
  return RestorePools(snapshot, note);
}

absl::Status NodePools::RestoreAll(const PoolsSnapshot& snapshot, std::string* note) {
  if (auto st = RestorePools(snapshot, note); !st.ok()) return st;
  absl::MutexLock lock(&create_mu_);
  last_model_swap_ = snapshot.model_swap;
  return absl::OkStatus();
}

absl::Status NodePools::RestorePools(const PoolsSnapshot& snapshot, std::string* note) {
  const std::shared_ptr<const Experiment> x = experiment();
  for (const auto& pool : snapshot.pools) {
    {
      // A restart with a lower --max-nodes rebuilds no more nodes than it
      // allows: the first ones, in key order; the others' later events and
      // calls are refused as new nodes would be.
      absl::ReaderMutexLock lock(&table_mu_);
      if (!pools_of_node_.contains(pool.node) && pools_of_node_.size() >= options_.max_nodes) {
        if (note != nullptr) {
          absl::StrAppend(note, note->empty() ? "" : "; ", ShardName(pool.node, pool.tier),
                          ": not restored, over --max-nodes ", options_.max_nodes);
        }
        continue;
      }
    }
    auto shard = std::make_unique<Shard>(pool.node, pool.tier, pool.image.capacity_bytes);
    {
      absl::MutexLock lock(&shard->mu);
      // Its arm's policy, and shadows that start empty (snapshots hold none).
      if (auto st = JoinExperimentLocked(*shard, *x, false); !st.ok()) return st;
      absl::Status refused;
      if (auto st = RestoreShard(*shard, pool.image, *options_.cost, options_.block_size,
                                 ShardEnv(*options_.cost, shard->model, pool.tier), &refused);
          !st.ok()) {
        return st;
      }
      if (!refused.ok()) {
        counters_.policy_states_refused.fetch_add(1, std::memory_order_relaxed);
        if (note != nullptr) {
          absl::StrAppend(note, note->empty() ? "" : "; ", ShardName(pool.node, pool.tier),
                          ": its policy refused its saved state (", refused.message(),
                          "), restarted from its residents");
        }
      }
      counters_.blocks_tracked.fetch_add(shard->catalog.size(), std::memory_order_relaxed);
      counters_.resident_blocks.fetch_add(
          shard->driver.pool().resident_blocks() + shard->proposals.size(),
          std::memory_order_relaxed);
      counters_.resident_bytes.fetch_add(shard->driver.pool().used_bytes() + shard->proposed_bytes,
                                         std::memory_order_relaxed);
    }
    absl::WriterMutexLock lock(&table_mu_);
    if (shards_.contains(std::make_pair(pool.node, static_cast<int>(NormalTier(pool.tier))))) {
      return absl::DataLossError(
          absl::StrCat("pool snapshot: ", ShardName(pool.node, pool.tier), " appears twice"));
    }
    InsertShardLocked(std::move(shard));
  }
  return absl::OkStatus();
}

void NodePools::CompactIfOverLocked(Shard& s) {
  const uint64_t ghosts = s.catalog.size() - s.driver.pool().resident_blocks();
  // Proposals and in-flight chains stay whatever the bound (an upper bound
  // of those not resident), so the next compaction is always ghost_blocks / 2
  // new ghosts away.
  if (ghosts > options_.ghost_blocks + s.proposals.size() + s.held_blocks) CompactLocked(s);
}

void NodePools::CompactLocked(Shard& s) {
  const size_t before = s.catalog.size();
  const ShardImage image = CaptureShard(s, options_.ghost_blocks / 2);
  if (image.blocks.size() == before) return;
  // The policy was built before from the same name and environment, so it
  // builds again; a state it refuses restarts it from the residents.
  absl::Status refused;
  RestoreShard(s, image, *options_.cost, options_.block_size,
               ShardEnv(*options_.cost, s.model, s.tier), &refused)
      .IgnoreError();
  if (!refused.ok()) counters_.policy_states_refused.fetch_add(1, std::memory_order_relaxed);
  counters_.blocks_tracked.fetch_sub(before - s.catalog.size(), std::memory_order_relaxed);
  ++s.compactions;
}

}  // namespace kvlearn
