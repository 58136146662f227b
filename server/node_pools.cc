#include "server/node_pools.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "policies/policy_driver.h"
#include "policies/policy_factory.h"
#include "server/node_shard.h"
#include "server/pools_snapshot.h"
#include "server/request_validation.h"
#include "server/shard_image.h"
#include "server/varint.h"

namespace kvlearn {

namespace {

using v1::Event;

// Capacity of a pool whose node never said (see the header).
constexpr uint64_t kUnbounded = UINT64_MAX / 2;

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

AccessInfo Access(const NodePools::Shard& s, int64_t timestamp_us) {
  AccessInfo a;
  a.time_ms = timestamp_us / 1000;
  a.request = s.current_request;
  return a;
}

}  // namespace

NodePools::NodePools(NodePoolsOptions options) : options_(std::move(options)) {}
NodePools::~NodePools() = default;

absl::Status NodePools::CheckOptions(const NodePoolsOptions& options) {
  if (options.cost == nullptr) return absl::InvalidArgumentError("no cost model");
  if (options.block_size == 0) return absl::InvalidArgumentError("--block-size must be > 0");
  if (auto s = CheckPolicyName(options.policy); !s.ok()) return s;
  if (IsOfflinePolicy(options.policy)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy '", options.policy, "' is an offline oracle: it needs the future of a trace"));
  }
  BlockCatalog catalog;
  PolicyDriver probe(&catalog, 1);
  return probe.StartPolicy(options.policy, MakePolicyEnv(*options.cost, options.model));
}

NodePools::Shard* NodePools::Find(const std::string& node, v1::Tier tier) const {
  absl::ReaderMutexLock lock(&table_mu_);
  auto it = shards_.find(std::make_pair(node, static_cast<int>(NormalTier(tier))));
  return it == shards_.end() ? nullptr : it->second.get();
}

absl::Status NodePools::WithShard(const std::string& node, v1::Tier tier, const std::string& field,
                                  const std::function<absl::Status(Shard&)>& fn) {
  if (auto s = ValidateNodeId(node, field); !s.ok()) return s;
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
  auto shard = std::make_unique<Shard>(
      node, tier, options_.default_pool_bytes ? options_.default_pool_bytes : kUnbounded);
  {
    absl::MutexLock lock(&shard->mu);
    std::shared_ptr<const LearnedModel> model;
    {
      absl::ReaderMutexLock table(&table_mu_);
      model = options_.model;
    }
    if (auto st = shard->driver.StartPolicy(options_.policy, MakePolicyEnv(*options_.cost, model));
        !st.ok()) {
      return st;
    }
    shard->model = std::move(model);
    if (auto st = fn(*shard); !st.ok()) return st;
    CompactIfOverLocked(*shard);
  }
  absl::WriterMutexLock lock(&table_mu_);
  shards_[std::make_pair(node, static_cast<int>(tier))] = std::move(shard);
  counters_.shards.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

namespace {

// Marks `b` as seen now, for the compaction's choice of recent ghosts.
void Touch(NodePools::Shard& s, BlockIndex b) { s.last_seen[b] = ++s.touch_clock; }

// Adds a block to the shard's catalog (or returns the known one, whose
// parent the caller has checked).
BlockIndex AddBlock(NodePools::Shard& s, const CostModel& cost, uint32_t block_size, uint64_t id,
                    BlockIndex parent, uint32_t tokens, uint64_t bytes, PoolCounters& counters) {
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
  const uint64_t begin = uint64_t{meta.depth} * block_size;
  meta.recompute_ms = cost.RecomputeMs(begin, begin + tokens);
  b = s.catalog.Add(meta);
  s.last_seen.push_back(0);
  Touch(s, b);
  s.driver.Grow();
  counters.blocks_tracked.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void EvictInView(NodePools::Shard& s, BlockIndex b, PoolCounters& counters) {
  s.driver.EvictLeaf(b);
  Touch(s, b);
  counters.resident_blocks.fetch_sub(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_sub(s.catalog[b].bytes, std::memory_order_relaxed);
}

void InsertInView(NodePools::Shard& s, BlockIndex b, const AccessInfo& access,
                  PoolCounters& counters) {
  s.driver.Insert(b, access);
  counters.resident_blocks.fetch_add(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_add(s.catalog[b].bytes, std::memory_order_relaxed);
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
  if (auto st = ValidateEvent(e); !st.ok()) return st;
  if (e.kind_case() == Event::kTransferFinished) return absl::OkStatus();  // no pool state
  return WithShard(e.node_id(), e.tier(), "node_id", [&](Shard& s) {
    s.last_timestamp_us = std::max(s.last_timestamp_us, e.timestamp_us());
    absl::Status st = ApplyLocked(s, e);
    if (st.ok()) {
      ++s.events_applied;
      accepted_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (shard_events != nullptr) *shard_events = s.events_applied;
    return st;
  });
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
          chain[i] = AddBlock(s, cost, bs, r.block_ids(i), parent, tokens, bytes, counters_);
        }
        parent = chain[i];
        Touch(s, chain[i]);
      }
      s.current_request = s.next_request++;
      ++s.requests;
      s.driver.BeginRequest(std::span<const BlockIndex>(chain.data(), chain.size()),
                            Access(s, e.timestamp_us()));
      return absl::OkStatus();
    }
    case Event::kBlockHit: {
      const uint64_t id = e.block_hit().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock || !s.driver.pool().IsResident(b)) {
        return absl::FailedPreconditionError(
            absl::StrCat("block_hit.block_id: block ", id, " is not stored on ",
                         ShardName(s.node, s.tier), " (send block_stored first)"));
      }
      s.driver.Hit(b, Access(s, e.timestamp_us()));
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
        if (parent == kNoBlock || !s.driver.pool().IsResident(parent)) {
          return absl::FailedPreconditionError(
              absl::StrCat("block_stored.parent_id: parent ", *parent_hash, " of block ",
                           st.block_id(), " is not stored on ", ShardName(s.node, s.tier),
                           " (a block is usable only after its whole prefix)"));
        }
      }
      BlockIndex b = s.catalog.Find(st.block_id());
      if (b != kNoBlock && s.catalog[b].bytes != static_cast<uint64_t>(st.bytes())) {
        return absl::InvalidArgumentError(absl::StrCat("block_stored.bytes: block ", st.block_id(),
                                                       " has ", st.bytes(), " bytes here but ",
                                                       s.catalog[b].bytes, " when first seen"));
      }
      b = AddBlock(s, cost, bs, st.block_id(), parent, static_cast<uint32_t>(st.tokens()),
                   static_cast<uint64_t>(st.bytes()), counters_);
      s.advised_evictions.erase(b);
      if (!s.driver.pool().IsResident(b))
        InsertInView(s, b, Access(s, e.timestamp_us()), counters_);
      return absl::OkStatus();
    }
    case Event::kBlockRemoved: {
      const uint64_t id = e.block_removed().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock) {
        return absl::NotFoundError(absl::StrCat("block_removed.block_id: block ", id,
                                                " was never seen on ", ShardName(s.node, s.tier)));
      }
      if (s.advised_evictions.erase(b) > 0 || !s.driver.pool().IsResident(b)) {
        return absl::OkStatus();  // already applied (a recommended eviction) or already gone
      }
      if (s.driver.pool().ResidentChildren(b) > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "block_removed.block_id: block ", id, " still has ",
            s.driver.pool().ResidentChildren(b), " stored children (remove leaves first)"));
      }
      EvictInView(s, b, counters_);
      return absl::OkStatus();
    }
    case Event::kPoolConfigured: {
      const auto capacity = static_cast<uint64_t>(e.pool_configured().capacity_bytes());
      if (capacity == s.driver.pool().capacity_bytes()) return absl::OkStatus();
      if (s.driver.pool().resident_blocks() > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pool_configured.capacity_bytes: ", ShardName(s.node, s.tier), " already holds ",
            s.driver.pool().resident_blocks(), " blocks (send all_blocks_cleared first)"));
      }
      // Nothing resident: start the pool and its policy afresh at the new size.
      s.advised_evictions.clear();
      s.evictions_before = 0;
      if (auto st = s.driver.Restart(capacity, MakePolicyEnv(*options_.cost, s.model)); !st.ok()) {
        return st;
      }
      return absl::OkStatus();
    }
    case Event::kAllBlocksCleared: {
      // A child always has a larger index than its parent: evicting in
      // decreasing index order only ever evicts leaves.
      for (BlockIndex b = static_cast<BlockIndex>(s.catalog.size()); b-- > 0;) {
        if (s.driver.pool().IsResident(b)) EvictInView(s, b, counters_);
      }
      s.advised_evictions.clear();
      // Everything just became a ghost: keep at most the compaction's share.
      CompactLocked(s);
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
    const std::string field = absl::StrCat("candidates[", i, "]");
    if (auto st = CheckParent(s.catalog, c.block_id(), parent_hash, field + ".parent_id");
        !st.ok()) {
      return st;
    }
    const BlockIndex b = s.catalog.Find(c.block_id());
    if (b != kNoBlock && s.catalog[b].bytes != static_cast<uint64_t>(c.bytes())) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".bytes: block ", c.block_id(), " has ",
                                                     c.bytes(), " bytes here but ",
                                                     s.catalog[b].bytes, " when first seen"));
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
  bool admitting = parent == kNoBlock || s.driver.pool().IsResident(parent);
  const AccessInfo access = Access(s, request.timestamp_us());
  v1::AdmitResponse response;
  response.set_policy(options_.policy);
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    const BlockIndex b =
        AddBlock(s, *options_.cost, options_.block_size, c.block_id(), parent,
                 static_cast<uint32_t>(c.tokens()), static_cast<uint64_t>(c.bytes()), counters_);
    parent = b;
    if (admitting && !s.driver.pool().IsResident(b)) admitting = s.driver.ShouldAdmit(b, access);
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
  response.set_policy(options_.policy);
  auto take = [&](BlockIndex b) {
    auto* v = response.add_victims();
    v->set_block_id(s.catalog[b].hash_id);
    v->set_bytes(static_cast<int64_t>(s.catalog[b].bytes));
    v->set_score(s.driver.EvictionPriority(b));
    freed += s.catalog[b].bytes;
    EvictInView(s, b, counters_);
    s.advised_evictions.insert(b);
  };

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
      take(*victim);
    }
  } else {
    std::vector<BlockIndex> candidates;
    candidates.reserve(request.candidate_ids_size());
    for (int i = 0; i < request.candidate_ids_size(); ++i) {
      const uint64_t id = request.candidate_ids(i);
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock) {
        return absl::NotFoundError(absl::StrCat("candidate_ids[", i, "]: block ", id,
                                                " was never seen on ", ShardName(s.node, s.tier)));
      }
      if (s.driver.pool().IsResident(b)) candidates.push_back(b);
    }
    std::sort(candidates.begin(), candidates.end());  // drop repeats, cheaply for small lists
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    std::vector<BlockIndex> order = s.driver.RankVictims(candidates);
    // Evicting a leaf can make its parent a leaf: sweep until nothing changes.
    bool progress = true;
    while (freed < want && progress) {
      progress = false;
      for (BlockIndex b : order) {
        if (freed >= want) break;
        if (s.driver.pool().IsEvictable(b)) {
          take(b);
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
    p->set_resident_blocks(s->driver.pool().resident_blocks());
    p->set_resident_bytes(s->driver.pool().used_bytes());
    p->set_requests(s->requests);
    p->set_evictions(s->evictions_before + s->driver.pool().evictions());
  }
}

absl::Status NodePools::SwapModel(std::shared_ptr<const LearnedModel> model,
                                  std::string_view path) {
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

absl::Status NodePools::RestoreAll(const PoolsSnapshot& snapshot) {
  std::shared_ptr<const LearnedModel> model;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    model = options_.model;
  }
  for (const auto& pool : snapshot.pools) {
    auto shard = std::make_unique<Shard>(pool.node, pool.tier, pool.image.capacity_bytes);
    {
      absl::MutexLock lock(&shard->mu);
      if (auto st =
              shard->driver.StartPolicy(options_.policy, MakePolicyEnv(*options_.cost, model));
          !st.ok()) {
        return st;
      }
      if (auto st = RestoreShard(*shard, pool.image, MakePolicyEnv(*options_.cost, model));
          !st.ok()) {
        return st;
      }
      shard->model = model;
      counters_.blocks_tracked.fetch_add(shard->catalog.size(), std::memory_order_relaxed);
      counters_.resident_blocks.fetch_add(shard->driver.pool().resident_blocks(),
                                          std::memory_order_relaxed);
      counters_.resident_bytes.fetch_add(shard->driver.pool().used_bytes(),
                                         std::memory_order_relaxed);
    }
    absl::WriterMutexLock lock(&table_mu_);
    auto& slot = shards_[std::make_pair(pool.node, static_cast<int>(NormalTier(pool.tier)))];
    if (slot != nullptr) {
      return absl::DataLossError(
          absl::StrCat("pool snapshot: ", ShardName(pool.node, pool.tier), " appears twice"));
    }
    slot = std::move(shard);
    counters_.shards.fetch_add(1, std::memory_order_relaxed);
  }
  absl::MutexLock lock(&create_mu_);
  last_model_swap_ = snapshot.model_swap;
  return absl::OkStatus();
}

void NodePools::CompactIfOverLocked(Shard& s) {
  const uint64_t ghosts = s.catalog.size() - s.driver.pool().resident_blocks();
  if (ghosts > options_.ghost_blocks) CompactLocked(s);
}

void NodePools::CompactLocked(Shard& s) {
  const size_t before = s.catalog.size();
  const ShardImage image = CaptureShard(s, options_.ghost_blocks / 2);
  if (image.blocks.size() == before) return;
  // The policy was built before from the same name and environment, so it
  // builds again.
  RestoreShard(s, image, MakePolicyEnv(*options_.cost, s.model)).IgnoreError();
  counters_.blocks_tracked.fetch_sub(before - s.catalog.size(), std::memory_order_relaxed);
  ++s.compactions;
}

}  // namespace kvlearn
