#include "server/node_pools.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "models/pool_state.h"

namespace kvlearn {

// One (node, tier): the state a policy needs, under its own mutex.
struct NodePools::Shard {
  Shard(std::string node_id, v1::Tier tier_value, uint64_t capacity)
      : node(std::move(node_id)), tier(tier_value), pool(&catalog, capacity) {}

  const std::string node;
  const v1::Tier tier;
  absl::Mutex mu;
  BlockCatalog catalog;
  PoolState pool;
  std::unique_ptr<RetentionPolicy> policy;
  // Blocks the sidecar recommended for eviction (and evicted in its view)
  // whose block-removed event has not arrived yet.
  absl::flat_hash_set<BlockIndex> advised_evictions;
  uint32_t next_request = 0;
  uint32_t current_request = 0;
  uint64_t requests = 0;
};

namespace {

using v1::Event;

// Capacity of a pool whose node never said (see the header).
constexpr uint64_t kUnbounded = UINT64_MAX / 2;

v1::Tier NormalTier(v1::Tier tier) { return tier == v1::TIER_UNSPECIFIED ? v1::TIER_POOL : tier; }

std::string ShardName(const std::string& node, v1::Tier tier) {
  return absl::StrCat("node '", node, "' tier ", v1::Tier_Name(tier));
}

AccessInfo Access(const NodePools::Shard& s, int64_t timestamp_us) {
  AccessInfo a;
  a.time_ms = timestamp_us / 1000;
  a.request = s.current_request;
  return a;
}

// `field` is a string or a callable returning one: built only on error,
// since these checks run per block on the ingestion path.
std::string FieldName(const char* f) { return f; }
std::string FieldName(const std::string& f) { return f; }
template <typename F>
std::string FieldName(const F& f) {
  return f();
}

template <typename Field>
absl::Status CheckSize(int64_t v, const Field& field) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(FieldName(field), ": must be > 0, got ", v));
}

std::string ParentText(const BlockCatalog& c, BlockIndex parent) {
  return parent == kNoBlock ? "nothing" : absl::StrCat(c[parent].hash_id);
}

// Checks that `id` (if already known) follows `parent_hash` (nullopt = root).
template <typename Field>
absl::Status CheckParent(const BlockCatalog& c, uint64_t id, std::optional<uint64_t> parent_hash,
                         const Field& field) {
  const BlockIndex b = c.Find(id);
  if (b == kNoBlock) return absl::OkStatus();
  const BlockIndex seen = c[b].parent;
  const bool same =
      parent_hash ? (seen != kNoBlock && c[seen].hash_id == *parent_hash) : seen == kNoBlock;
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(FieldName(field), ": block id ", id, " follows ",
                   parent_hash ? absl::StrCat(*parent_hash) : std::string("nothing"), " here but ",
                   ParentText(c, seen), " before, so the ids are not prefix hashes"));
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
  PoolState pool(&catalog, 1);
  PolicyEnv env;
  env.catalog = &catalog;
  env.pool = &pool;
  env.model = options.model;
  env.features.link_bytes_per_ms = options.cost->hardware().rdma_gb_per_s * 1e6;
  auto policy = CreatePolicy(options.policy, env);
  return policy.ok() ? absl::OkStatus() : policy.status();
}

absl::Status NodePools::ValidateNodeId(std::string_view node_id, const std::string& field) {
  if (node_id.empty() || node_id.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be 1..128 characters, got ", node_id.size()));
  }
  for (char c : node_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": character 0x",
                                                     absl::Hex(static_cast<unsigned char>(c)),
                                                     " not allowed (use [A-Za-z0-9._:/-])"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<NodePools::Shard*> NodePools::FindOrCreate(const std::string& node, v1::Tier tier,
                                                          const std::string& field) {
  if (auto s = ValidateNodeId(node, field); !s.ok()) return s;
  if (!v1::Tier_IsValid(tier)) {
    return absl::InvalidArgumentError(absl::StrCat("tier: unknown value ", static_cast<int>(tier)));
  }
  tier = NormalTier(tier);
  const auto key = std::make_pair(node, static_cast<int>(tier));
  {
    absl::ReaderMutexLock lock(&table_mu_);
    auto it = shards_.find(key);
    if (it != shards_.end()) return it->second.get();
  }
  if (options_.strict_nodes && !options_.known_nodes.contains(node)) {
    return absl::NotFoundError(
        absl::StrCat(field, ": unknown node '", node, "' (--strict-nodes; known: --nodes)"));
  }
  absl::WriterMutexLock lock(&table_mu_);
  auto& slot = shards_[key];
  if (slot == nullptr) {
    auto shard = std::make_unique<Shard>(
        node, tier, options_.default_pool_bytes ? options_.default_pool_bytes : kUnbounded);
    PolicyEnv env;
    env.catalog = &shard->catalog;
    env.pool = &shard->pool;
    env.model = options_.model;
    env.features.link_bytes_per_ms = options_.cost->hardware().rdma_gb_per_s * 1e6;
    auto policy = CreatePolicy(options_.policy, env);
    if (!policy.ok()) {
      shards_.erase(key);
      return policy.status();
    }
    shard->policy = std::move(*policy);
    slot = std::move(shard);
    counters_.shards.fetch_add(1, std::memory_order_relaxed);
  }
  return slot.get();
}

namespace {

// Adds a block to the shard's catalog (or returns the known one, whose
// parent the caller has checked).
BlockIndex AddBlock(NodePools::Shard& s, const CostModel& cost, uint32_t block_size, uint64_t id,
                    BlockIndex parent, uint32_t tokens, uint64_t bytes, PoolCounters& counters) {
  BlockIndex b = s.catalog.Find(id);
  if (b != kNoBlock) return b;
  BlockMeta meta;
  meta.hash_id = id;
  meta.parent = parent;
  meta.depth = parent == kNoBlock ? 0 : s.catalog[parent].depth + 1;
  meta.tokens = tokens;
  meta.bytes = bytes;
  const uint64_t begin = uint64_t{meta.depth} * block_size;
  meta.recompute_ms = cost.RecomputeMs(begin, begin + tokens);
  b = s.catalog.Add(meta);
  s.pool.Grow(s.catalog.size());
  counters.blocks_tracked.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void EvictInView(NodePools::Shard& s, BlockIndex b, PoolCounters& counters) {
  s.pool.Evict(b);
  s.policy->OnEvict(b);
  counters.resident_blocks.fetch_sub(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_sub(s.catalog[b].bytes, std::memory_order_relaxed);
}

void InsertInView(NodePools::Shard& s, BlockIndex b, const AccessInfo& access,
                  PoolCounters& counters) {
  s.pool.Insert(b);
  s.pool.Pin(b);
  s.policy->OnInsert(b, access);
  counters.resident_blocks.fetch_add(1, std::memory_order_relaxed);
  counters.resident_bytes.fetch_add(s.catalog[b].bytes, std::memory_order_relaxed);
}

}  // namespace

absl::Status NodePools::Apply(const Event& e) {
  if (e.timestamp_us() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timestamp_us: must be >= 0, got ", e.timestamp_us()));
  }
  // Check what needs no shard first, so a malformed event creates nothing.
  switch (e.kind_case()) {
    case Event::kRequestArrival: {
      const auto& r = e.request_arrival();
      if (r.block_ids().empty()) {
        return absl::InvalidArgumentError("request_arrival.block_ids: empty");
      }
      if (r.input_length() < 0 || r.output_length() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "request_arrival.", r.input_length() < 0 ? "input_length" : "output_length",
            ": must be >= 0"));
      }
      if (!r.block_tokens().empty() && r.block_tokens_size() != r.block_ids_size()) {
        return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_tokens: has ",
                                                       r.block_tokens_size(), " entries for ",
                                                       r.block_ids_size(), " block ids"));
      }
      if (!r.block_bytes().empty() && r.block_bytes_size() != r.block_ids_size()) {
        return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_bytes: has ",
                                                       r.block_bytes_size(), " entries for ",
                                                       r.block_ids_size(), " block ids"));
      }
      for (int i = 0; i < r.block_tokens_size(); ++i) {
        if (auto s =
                CheckSize(r.block_tokens(i),
                          [i] { return absl::StrCat("request_arrival.block_tokens[", i, "]"); });
            !s.ok()) {
          return s;
        }
      }
      for (int i = 0; i < r.block_bytes_size(); ++i) {
        if (auto s =
                CheckSize(r.block_bytes(i),
                          [i] { return absl::StrCat("request_arrival.block_bytes[", i, "]"); });
            !s.ok()) {
          return s;
        }
      }
      // A repeated id would make the chain a cycle. Short chains (most) are
      // checked pairwise, without allocating.
      absl::flat_hash_set<uint64_t> seen;
      const int n = r.block_ids_size();
      for (int i = 0; i < n; ++i) {
        bool repeat = false;
        if (n <= 32) {
          for (int j = 0; j < i && !repeat; ++j) repeat = r.block_ids(j) == r.block_ids(i);
        } else {
          repeat = !seen.insert(r.block_ids(i)).second;
        }
        if (repeat) {
          return absl::InvalidArgumentError(absl::StrCat("request_arrival.block_ids[", i, "]: id ",
                                                         r.block_ids(i),
                                                         " repeats within the chain"));
        }
      }
      break;
    }
    case Event::kBlockStored: {
      const auto& st = e.block_stored();
      if (auto s = CheckSize(st.tokens(), "block_stored.tokens"); !s.ok()) return s;
      if (auto s = CheckSize(st.bytes(), "block_stored.bytes"); !s.ok()) return s;
      if (st.has_parent_id() && st.parent_id() == st.block_id()) {
        return absl::InvalidArgumentError(
            absl::StrCat("block_stored.parent_id: block ", st.block_id(), " is its own parent"));
      }
      if (st.tokens() > UINT32_MAX) {
        return absl::InvalidArgumentError("block_stored.tokens: too large");
      }
      break;
    }
    case Event::kTransferFinished: {
      const auto& t = e.transfer_finished();
      if (t.bytes() < 0 || t.microseconds() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "transfer_finished.", t.bytes() < 0 ? "bytes" : "microseconds", ": must be >= 0"));
      }
      return ValidateNodeId(e.node_id(), "node_id");  // no pool state involved
    }
    case Event::kPoolConfigured:
      if (auto s =
              CheckSize(e.pool_configured().capacity_bytes(), "pool_configured.capacity_bytes");
          !s.ok()) {
        return s;
      }
      break;
    case Event::kBlockRemoved:
    case Event::kBlockHit:
    case Event::kAllBlocksCleared:
      break;
    case Event::KIND_NOT_SET:
      return absl::InvalidArgumentError("kind: no event set");
  }

  auto shard = FindOrCreate(e.node_id(), e.tier(), "node_id");
  if (!shard.ok()) return shard.status();
  Shard& s = **shard;
  absl::MutexLock lock(&s.mu);
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
                             [i] { return absl::StrCat("request_arrival.block_ids[", i, "]"); });
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
      }
      s.pool.BeginRequest();
      s.current_request = s.next_request++;
      ++s.requests;
      s.policy->OnRequest(std::span<const BlockIndex>(chain.data(), chain.size()),
                          Access(s, e.timestamp_us()));
      return absl::OkStatus();
    }
    case Event::kBlockHit: {
      const uint64_t id = e.block_hit().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock || !s.pool.IsResident(b)) {
        return absl::FailedPreconditionError(
            absl::StrCat("block_hit.block_id: block ", id, " is not stored on ",
                         ShardName(s.node, s.tier), " (send block_stored first)"));
      }
      s.pool.Pin(b);
      s.policy->OnHit(b, Access(s, e.timestamp_us()));
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
        if (parent == kNoBlock || !s.pool.IsResident(parent)) {
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
      if (!s.pool.IsResident(b)) InsertInView(s, b, Access(s, e.timestamp_us()), counters_);
      return absl::OkStatus();
    }
    case Event::kBlockRemoved: {
      const uint64_t id = e.block_removed().block_id();
      const BlockIndex b = s.catalog.Find(id);
      if (b == kNoBlock) {
        return absl::NotFoundError(absl::StrCat("block_removed.block_id: block ", id,
                                                " was never seen on ", ShardName(s.node, s.tier)));
      }
      if (s.advised_evictions.erase(b) > 0 || !s.pool.IsResident(b)) {
        return absl::OkStatus();  // already applied (a recommended eviction) or already gone
      }
      if (s.pool.ResidentChildren(b) > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("block_removed.block_id: block ", id, " still has ",
                         s.pool.ResidentChildren(b), " stored children (remove leaves first)"));
      }
      EvictInView(s, b, counters_);
      return absl::OkStatus();
    }
    case Event::kPoolConfigured: {
      const auto capacity = static_cast<uint64_t>(e.pool_configured().capacity_bytes());
      if (capacity == s.pool.capacity_bytes()) return absl::OkStatus();
      if (s.pool.resident_blocks() > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pool_configured.capacity_bytes: ", ShardName(s.node, s.tier), " already holds ",
            s.pool.resident_blocks(), " blocks (send all_blocks_cleared first)"));
      }
      // Nothing resident: start the pool and its policy afresh at the new size.
      PolicyEnv env;
      env.catalog = &s.catalog;
      env.model = options_.model;
      env.features.link_bytes_per_ms = options_.cost->hardware().rdma_gb_per_s * 1e6;
      s.policy.reset();
      s.pool = PoolState(&s.catalog, capacity);
      env.pool = &s.pool;
      auto policy = CreatePolicy(options_.policy, env);
      if (!policy.ok()) return policy.status();
      s.policy = std::move(*policy);
      s.advised_evictions.clear();
      return absl::OkStatus();
    }
    case Event::kAllBlocksCleared: {
      // A child always has a larger index than its parent: evicting in
      // decreasing index order only ever evicts leaves.
      for (BlockIndex b = static_cast<BlockIndex>(s.catalog.size()); b-- > 0;) {
        if (s.pool.IsResident(b)) EvictInView(s, b, counters_);
      }
      s.advised_evictions.clear();
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<v1::AdmitResponse> NodePools::Admit(const v1::AdmitRequest& request) {
  if (request.timestamp_us() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timestamp_us: must be >= 0, got ", request.timestamp_us()));
  }
  const int n = request.candidates_size();
  if (n == 0) return absl::InvalidArgumentError("candidates: empty");
  if (static_cast<uint32_t>(n) > options_.max_candidates) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "candidates: ", n, " over the limit of ", options_.max_candidates, " (--max-candidates)"));
  }
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    const std::string field = absl::StrCat("candidates[", i, "]");
    if (auto s = CheckSize(c.tokens(), field + ".tokens"); !s.ok()) return s;
    if (auto s = CheckSize(c.bytes(), field + ".bytes"); !s.ok()) return s;
    if (c.tokens() > UINT32_MAX) return absl::InvalidArgumentError(field + ".tokens: too large");
    if (i > 0 && (!c.has_parent_id() || c.parent_id() != request.candidates(i - 1).block_id())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parent_id: must be the previous candidate's block_id ",
                       request.candidates(i - 1).block_id(), " (candidates form one chain)"));
    }
    if (c.has_parent_id() && c.parent_id() == c.block_id()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parent_id: block ", c.block_id(), " is its own parent"));
    }
  }
  auto shard = FindOrCreate(request.node_id(), request.tier(), "node_id");
  if (!shard.ok()) return shard.status();
  Shard& s = **shard;
  absl::MutexLock lock(&s.mu);
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
  bool admitting = parent == kNoBlock || s.pool.IsResident(parent);
  const AccessInfo access = Access(s, request.timestamp_us());
  v1::AdmitResponse response;
  response.set_policy(options_.policy);
  for (int i = 0; i < n; ++i) {
    const auto& c = request.candidates(i);
    const BlockIndex b =
        AddBlock(s, *options_.cost, options_.block_size, c.block_id(), parent,
                 static_cast<uint32_t>(c.tokens()), static_cast<uint64_t>(c.bytes()), counters_);
    parent = b;
    if (admitting && !s.pool.IsResident(b)) admitting = s.policy->ShouldAdmit(b, access);
    auto* d = response.add_decisions();
    d->set_block_id(c.block_id());
    d->set_keep(admitting);
    d->set_score(admitting ? 1.0 : 0.0);
  }
  return response;
}

absl::StatusOr<v1::RankResponse> NodePools::RankEviction(const v1::RankRequest& request) {
  if (request.bytes_to_free() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes_to_free: must be > 0, got ", request.bytes_to_free()));
  }
  if (static_cast<uint32_t>(request.candidate_ids_size()) > options_.max_candidates) {
    return absl::ResourceExhaustedError(
        absl::StrCat("candidate_ids: ", request.candidate_ids_size(), " over the limit of ",
                     options_.max_candidates, " (--max-candidates)"));
  }
  auto shard = FindOrCreate(request.node_id(), request.tier(), "node_id");
  if (!shard.ok()) return shard.status();
  Shard& s = **shard;
  absl::MutexLock lock(&s.mu);
  const auto want = static_cast<uint64_t>(request.bytes_to_free());
  uint64_t freed = 0;
  v1::RankResponse response;
  response.set_policy(options_.policy);
  auto take = [&](BlockIndex b) {
    auto* v = response.add_victims();
    v->set_block_id(s.catalog[b].hash_id);
    v->set_bytes(static_cast<int64_t>(s.catalog[b].bytes));
    v->set_score(s.policy->EvictionPriority(b));
    freed += s.catalog[b].bytes;
    EvictInView(s, b, counters_);
    s.advised_evictions.insert(b);
  };

  if (request.candidate_ids().empty()) {
    while (freed < want) {
      const BlockIndex victim = s.policy->SelectVictim();
      if (victim == kNoBlock) break;
      if (!s.pool.IsEvictable(victim)) {
        return absl::InternalError(absl::StrCat("policy '", options_.policy, "' chose block ",
                                                s.catalog[victim].hash_id,
                                                " which is not an evictable leaf"));
      }
      take(victim);
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
      if (s.pool.IsResident(b)) candidates.push_back(b);
    }
    std::sort(candidates.begin(), candidates.end());  // drop repeats, cheaply for small lists
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    std::vector<BlockIndex> order = s.policy->RankVictims(candidates);
    // Evicting a leaf can make its parent a leaf: sweep until nothing changes.
    bool progress = true;
    while (freed < want && progress) {
      progress = false;
      for (BlockIndex b : order) {
        if (freed >= want) break;
        if (s.pool.IsEvictable(b)) {
          take(b);
          progress = true;
        }
      }
    }
  }
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
    p->set_resident_blocks(s->pool.resident_blocks());
    p->set_resident_bytes(s->pool.used_bytes());
    p->set_requests(s->requests);
    p->set_evictions(s->pool.evictions());
  }
}

absl::Status NodePools::SwapModel(std::shared_ptr<const LearnedModel> model) {
  {
    // Ask a throwaway policy first, so a policy without a model refuses even
    // before any node has shown up.
    BlockCatalog catalog;
    PoolState pool(&catalog, 1);
    PolicyEnv env;
    env.catalog = &catalog;
    env.pool = &pool;
    {
      absl::ReaderMutexLock lock(&table_mu_);
      env.model = options_.model;
    }
    env.features.link_bytes_per_ms = options_.cost->hardware().rdma_gb_per_s * 1e6;
    auto probe = CreatePolicy(options_.policy, env);
    if (!probe.ok()) return probe.status();
    if (auto st = (*probe)->SwapModel(model); !st.ok()) return st;
  }
  std::vector<Shard*> shards;
  {
    absl::ReaderMutexLock lock(&table_mu_);
    for (const auto& [key, shard] : shards_) shards.push_back(shard.get());
  }
  for (Shard* s : shards) {
    absl::MutexLock lock(&s->mu);
    if (auto st = s->policy->SwapModel(model); !st.ok()) return st;
  }
  absl::WriterMutexLock lock(&table_mu_);
  options_.model = std::move(model);  // for shards created from now on
  return absl::OkStatus();
}

}  // namespace kvlearn
