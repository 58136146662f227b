#include "sim/cluster_simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sim/pool_simulator.h"

namespace kvlearn {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// What a finished transfer was for; the low two bits of its tag.
enum TransferKind : uint64_t { kBackground = 0, kLoad = 1, kCopy = 2 };
uint64_t Tag(TransferKind kind, uint64_t id) { return id << 2 | kind; }

enum class EventKind : uint8_t { kLinkDone, kPrefillDone };
struct Event {
  double t;
  uint64_t seq;  // insertion order: equal times run first-scheduled first
  EventKind kind;
  uint32_t target;   // link or node
  uint64_t version;  // link events: stale unless equal to the link's version
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// A replication copy of the first `prefix_blocks` blocks of request
// `request`'s chain; requests sharing its first `key_blocks` blocks may wait
// for it.
struct Copy {
  uint32_t source = 0;
  uint32_t target = 0;
  uint32_t request = 0;
  uint32_t key_blocks = 0;
  uint32_t prefix_blocks = 0;
  uint32_t held_blocks = 0;  // leading blocks the target already had: not sent
  bool started = false;
  bool finished = false;
};

struct Node {
  Node(const BlockCatalog* catalog, uint64_t hbm_bytes) : hbm(catalog, hbm_bytes) {}
  PolicyDriver hbm;
  std::unique_ptr<PolicyDriver> dram;
  std::deque<uint32_t> queue;
  uint32_t load = 0;     // routed and not yet prefilled
  double queued_ms = 0;  // estimated prefill of the queued requests (ClusterView::BacklogMs)
  // Blocks promised to this node by routed requests and incoming copies:
  // how many promise each, and whether HBM lacks it (then its bytes are in
  // pending_absent_bytes, which CachedBytes adds to what HBM holds).
  struct Promised {
    uint32_t count = 0;
    bool absent = false;
  };
  absl::flat_hash_map<BlockIndex, Promised> pending;
  uint64_t pending_absent_bytes = 0;
  std::vector<uint32_t> incoming;  // copies into this node not finished
  std::vector<uint32_t> deferred;  // copies from this node waiting for the prefix
  // The request being served.
  uint32_t current = kNone;
  // Requests that reached the head but wait for a copy (request, copy): they
  // step aside so the node serves the queue meanwhile.
  std::vector<std::pair<uint32_t, uint32_t>> parked;
  uint32_t pending_loads = 0;
  double start_ms = 0, loads_done_ms = 0, prefill_ms = 0;
  double begin_ms = 0;        // when the node began serving the current request (loads start)
  double prefill_end_ms = 0;  // when the current request's prefill ends (estimate while loading)
  uint32_t used_blocks = 0;   // blocks not recomputed
  uint64_t used_tokens = 0;
  uint32_t hbm_blocks = 0, dram_blocks = 0, pool_blocks = 0;
  uint64_t loaded_bytes = 0;
  uint64_t dram_loaded_bytes = 0, pool_loaded_bytes = 0;
};

class Simulator final : public ClusterView, public ClusterState {
 public:
  Simulator(const ReplayTrace& replay, const CostModel& cost, const ClusterOptions& o)
      : replay_(replay), trace_(*replay.trace), cost_(cost), o_(o) {}

  absl::StatusOr<ClusterResult> Run();

  // ClusterView.
  uint32_t nodes() const override { return static_cast<uint32_t>(nodes_.size()); }
  uint32_t Load(uint32_t n) const override { return nodes_[n]->load; }
  uint32_t MatchedBlocks(uint32_t n, std::span<const BlockIndex> chain) const override {
    const Node& node = *nodes_[n];
    uint32_t k = 0;
    while (k < chain.size() &&
           (node.hbm.pool().IsResident(chain[k]) || node.pending.contains(chain[k]))) {
      ++k;
    }
    return k;
  }
  uint64_t CachedBytes(uint32_t n) const override {
    return nodes_[n]->hbm.pool().used_bytes() + nodes_[n]->pending_absent_bytes;
  }
  const BlockCatalog& catalog() const override { return replay_.catalog; }
  double BacklogMs(uint32_t n) const override {
    return RemainingMs(*nodes_[n]) + std::max(0.0, nodes_[n]->queued_ms);
  }
  double ReadyMs(uint32_t n, std::span<const BlockIndex> prefix) const override;
  double ServiceMs(uint32_t n, std::span<const BlockIndex> chain, uint64_t input_tokens,
                   uint32_t hbm_blocks) const override {
    return ChooseLoads(n, chain, input_tokens, hbm_blocks).ms;
  }
  double CopyMs(uint64_t bytes) const override { return cost_.TransferMs(bytes); }
  const PoolState* GlobalPool() const override { return pool_ ? &pool_->pool() : nullptr; }

  // ClusterState.
  const PoolState& Hbm(uint32_t n) const override { return nodes_[n]->hbm.pool(); }
  const PoolState* Dram(uint32_t n) const override {
    return nodes_[n]->dram ? &nodes_[n]->dram->pool() : nullptr;
  }
  const std::vector<Link>& Links() const override { return links_; }
  double now_ms() const override { return now_; }

 private:
  std::span<const BlockIndex> Chain(uint32_t ri) const {
    const TraceRequest& r = trace_.requests[ri];
    return {replay_.blocks.data() + r.first_block, r.num_blocks};
  }
  // A use or an admission of request ri, happening now. Policies are told
  // the time it happens, as the sidecar is by the engine's events: a request
  // uses its blocks when it starts on its node and admits them when its
  // prefill ends. Its arrival time would run the shared pool's clock
  // backwards whenever a request that queued longer starts after one that
  // arrived later, and the policies that read time (learned, kvlearn-cars)
  // would see idle times off by the queue waits.
  AccessInfo Access(uint32_t ri) const {
    return {static_cast<int64_t>(std::llround(now_)), ri, trace_.requests[ri].first_block};
  }
  Link& Rdma(uint32_t n) { return links_[2 * n]; }
  Link& Pcie(uint32_t n) { return links_[2 * n + 1]; }
  uint32_t RdmaId(uint32_t n) const { return 2 * n; }
  uint32_t PcieId(uint32_t n) const { return 2 * n + 1; }

  // A node's HBM and DRAM hold what the node computed (admission moves no
  // priced bytes); the pool is sent each block over RDMA.
  absl::Status StartPolicy(PolicyDriver& tier, bool admission_moves_bytes) const {
    PolicyEnv env = MakePolicyEnv(cost_, o_.model, &replay_.next_use);
    env.admission_moves_bytes = admission_moves_bytes;
    if (o_.make_policy) return tier.StartPolicy(o_.make_policy, std::move(env));
    return tier.StartPolicy(o_.retention_policy, std::move(env));
  }
  absl::StatusOr<std::unique_ptr<PolicyDriver>> NewTier(uint64_t bytes,
                                                        bool admission_moves_bytes) const {
    auto tier = std::make_unique<PolicyDriver>(&replay_.catalog, bytes);
    if (auto s = StartPolicy(*tier, admission_moves_bytes); !s.ok()) return s;
    return tier;
  }

  void Push(double t, EventKind kind, uint32_t target, uint64_t version = 0) {
    events_.push({t, seq_++, kind, target, version});
  }
  void StartTransfer(uint32_t link, uint64_t bytes, uint64_t tag) {
    links_[link].Start(now_, bytes, tag);
    Push(links_[link].NextCompletionMs(), EventKind::kLinkDone, link, ++link_version_[link]);
  }

  void AddPending(Node& node, std::span<const BlockIndex> chain) {
    for (BlockIndex b : chain) {
      Node::Promised& p = node.pending[b];
      if (p.count++ == 0 && !node.hbm.pool().IsResident(b)) SetAbsent(node, b, p, true);
    }
  }
  void RemovePending(Node& node, std::span<const BlockIndex> chain) {
    for (BlockIndex b : chain) {
      auto it = node.pending.find(b);
      if (--it->second.count > 0) continue;
      if (it->second.absent) SetAbsent(node, b, it->second, false);
      node.pending.erase(it);
    }
  }
  void SetAbsent(Node& node, BlockIndex b, Node::Promised& p, bool absent) {
    if (p.absent == absent) return;
    p.absent = absent;
    const uint64_t bytes = replay_.catalog[b].bytes;
    node.pending_absent_bytes += absent ? bytes : -bytes;
  }
  // Offers blocks [0, end) of `chain` to `node`'s HBM, keeping the promised
  // blocks' absent flags in step with what enters and leaves it.
  absl::Status AdmitToHbm(Node& node, std::span<const BlockIndex> chain, uint32_t end,
                          const AccessInfo& access, uint64_t& inserted, uint64_t& evicted) {
    auto s = node.hbm.Admit(chain, 0, end, access, inserted, evicted, [&](BlockIndex victim) {
      if (auto it = node.pending.find(victim); it != node.pending.end()) {
        SetAbsent(node, victim, it->second, true);
      }
    });
    for (uint32_t i = 0; i < end; ++i) {
      auto it = node.pending.find(chain[i]);
      if (it != node.pending.end() && node.hbm.pool().IsResident(chain[i])) {
        SetAbsent(node, chain[i], it->second, false);
      }
    }
    return s;
  }

  // Of blocks [hbm_blocks, ...) of `chain` on node n, how far to load (from
  // DRAM where it holds them, else the pool) before recomputing the rest:
  // the end j with the least estimated loads + prefill, at nominal bandwidth.
  struct LoadChoice {
    uint32_t dram_blocks = 0;  // leading blocks DRAM holds
    uint32_t pool_blocks = 0;  // leading blocks the pool holds
    uint32_t end = 0;          // blocks [hbm_blocks, end) are loaded
    uint64_t tokens = 0;       // tokens in blocks [0, end)
    double ms = 0;             // estimated loads + prefill
  };
  LoadChoice ChooseLoads(uint32_t n, std::span<const BlockIndex> chain, uint64_t input_tokens,
                         uint32_t hbm_blocks) const;

  // Prefill time of tokens [done_tokens, tokens) of a prompt: marginal, so
  // the missed tokens still attend to the loaded prefix.
  double PrefillMs(uint64_t done_tokens, uint64_t tokens) const {
    return cost_.RecomputeMs(done_tokens, tokens);
  }

  // Estimated ms left of the request `node` is serving (its estimate from
  // routing while it waits for a copy).
  double RemainingMs(const Node& node) const {
    if (node.current == kNone) return 0;
    return std::max(0.0, node.prefill_end_ms - now_);
  }
  // Whether request ri's chain contains `prefix` (same last block at the
  // same depth: a block id names its whole prefix).
  bool Covers(uint32_t ri, std::span<const BlockIndex> prefix) const {
    const auto chain = Chain(ri);
    return chain.size() >= prefix.size() && chain[prefix.size() - 1] == prefix.back();
  }

  void Arrive(uint32_t ri);
  // Counts a request routed to a node with more outstanding requests than
  // the least loaded one (the router's herding; ClusterResult).
  void CountHerding(uint32_t chosen);
  void Replicate(uint32_t ri, const ReplicationOrder& order);
  void StartCopy(uint32_t copy_id);
  void DropCopy(uint32_t copy_id);
  void Unblock(uint32_t node, uint32_t copy_id);
  bool WorthWaiting(const Copy& c) const;
  uint32_t CopyToWaitFor(uint32_t n, uint32_t ri) const;
  absl::Status FinishCopy(uint32_t copy_id);
  void ServeDeferred(uint32_t n);
  void StartNext(uint32_t n);
  void Begin(uint32_t n);
  void LoadsDone(uint32_t n);
  absl::Status PrefillDone(uint32_t n);
  absl::Status LinkDone(uint32_t link);

  const ReplayTrace& replay_;
  const Trace& trace_;
  const CostModel& cost_;
  const ClusterOptions& o_;

  std::vector<std::unique_ptr<Node>> nodes_;
  std::unique_ptr<PolicyDriver> pool_;
  std::vector<Link> links_;
  std::vector<uint64_t> link_version_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<ReplicationPolicy> replicator_;
  std::vector<Copy> copies_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  uint32_t eval_start_ = 0;
  uint32_t completed_ = 0;
  ReplicationOrder order_;

  ClusterResult result_;
  std::vector<double> ttft_, queue_, load_, prefill_;
  std::vector<double> estimate_ms_;  // per request: prefill estimated when routed
  std::vector<double> head_ms_;      // per request: first reached its queue's head (NaN: not yet)
};

Simulator::LoadChoice Simulator::ChooseLoads(uint32_t n, std::span<const BlockIndex> chain,
                                             uint64_t input_tokens, uint32_t hbm_blocks) const {
  const Node& node = *nodes_[n];
  const BlockCatalog& catalog = replay_.catalog;
  const HardwareProfile& hw = cost_.hardware();
  LoadChoice best;
  best.dram_blocks = node.dram ? node.dram->Lookup(chain) : 0;
  best.pool_blocks = pool_ ? pool_->Lookup(chain) : 0;
  const uint32_t reach = std::max({hbm_blocks, best.dram_blocks, best.pool_blocks});
  uint64_t tokens = 0;
  for (uint32_t i = 0; i < hbm_blocks; ++i) tokens += catalog[chain[i]].tokens;
  best.end = hbm_blocks;
  best.tokens = tokens;
  best.ms = PrefillMs(tokens, input_tokens);
  double load_ms = 0;
  for (uint32_t j = hbm_blocks; j < reach; ++j) {
    const BlockMeta& m = catalog[chain[j]];
    const double gbps = j < best.dram_blocks ? hw.pcie_gb_per_s : hw.rdma_gb_per_s;
    load_ms += static_cast<double>(m.bytes) / BytesPerMs(gbps);
    tokens += m.tokens;
    const double total = load_ms + PrefillMs(tokens, input_tokens);
    if (total < best.ms) {
      best.end = j + 1;
      best.tokens = tokens;
      best.ms = total;
    }
  }
  return best;
}

double Simulator::ReadyMs(uint32_t n, std::span<const BlockIndex> prefix) const {
  if (prefix.empty()) return 0;
  const Node& node = *nodes_[n];
  if (node.hbm.pool().IsResident(prefix.back())) return 0;  // ancestors are resident too
  if (!node.pending.contains(prefix.back())) return std::numeric_limits<double>::infinity();
  double t = RemainingMs(node);
  if (node.current != kNone && Covers(node.current, prefix)) return t;
  for (const uint32_t q : node.queue) {
    t += estimate_ms_[q];
    if (Covers(q, prefix)) return t;
  }
  return t;  // an incoming copy brings it: assume by the time the queue drains
}

void Simulator::Arrive(uint32_t ri) {
  const TraceRequest& r = trace_.requests[ri];
  const RouteRequest request{ri, r.timestamp_ms, r.input_length, Chain(ri)};
  if (ri == eval_start_) {
    for (uint32_t n = 0; n < nodes(); ++n) {
      result_.backlog_at_eval_requests += Load(n);
      result_.backlog_at_eval_ms += BacklogMs(n) / nodes();
    }
  }
  if (replicator_->OnArrival(request, *this, order_)) Replicate(ri, order_);
  uint32_t n = replicator_->Route(request, *this);
  if (n >= nodes()) n = router_->Route(request, *this);
  if (ri >= eval_start_) CountHerding(n);
  Node& node = *nodes_[n];
  estimate_ms_[ri] = ServiceMs(n, request.chain, r.input_length, MatchedBlocks(n, request.chain));
  node.queued_ms += estimate_ms_[ri];
  AddPending(node, request.chain);
  ++node.load;
  node.queue.push_back(ri);
  StartNext(n);
}

void Simulator::CountHerding(uint32_t chosen) {
  uint32_t least = Load(chosen);
  for (uint32_t n = 0; n < nodes(); ++n) least = std::min(least, Load(n));
  if (Load(chosen) == least) return;
  ++result_.routed_to_busier;
  result_.routed_excess_requests += Load(chosen) - least;
}

void Simulator::Replicate(uint32_t ri, const ReplicationOrder& order) {
  const auto chain = Chain(ri);
  if (order.prefix_blocks == 0 || chain.size() < order.prefix_blocks) return;
  // Source: the node sharing the longest prefix with this prompt, resident
  // or being computed there (at least the ordered prefix); ties prefer a node
  // that holds all of it now, then the least loaded. The copy carries that
  // whole shared prefix, since copying only the burst key would leave the
  // targets recomputing the rest of a long shared context. A source still
  // computing part of it sends once that prefill ends.
  uint32_t source = kNone, copy_blocks = 0;
  bool ready = false;
  for (uint32_t n = 0; n < nodes(); ++n) {
    const uint32_t m = MatchedBlocks(n, chain);
    if (m < order.prefix_blocks) continue;
    const bool holds = nodes_[n]->hbm.Lookup(chain) >= m;
    if (source == kNone || m > copy_blocks ||
        (m == copy_blocks && (holds > ready || (holds == ready && Load(n) < Load(source))))) {
      source = n;
      copy_blocks = m;
      ready = holds;
    }
  }
  if (source == kNone) return;
  for (uint32_t t : order.targets) {
    if (t >= nodes() || t == source) continue;
    Node& target = *nodes_[t];
    const uint32_t held = MatchedBlocks(t, chain.first(copy_blocks));
    if (held == copy_blocks) continue;  // holds it already, or will
    const auto id = static_cast<uint32_t>(copies_.size());
    copies_.push_back({source, t, ri, order.prefix_blocks, copy_blocks, held, false, false});
    AddPending(target, chain.first(copy_blocks));
    target.incoming.push_back(id);
    if (ready) {
      StartCopy(id);
    } else {
      nodes_[source]->deferred.push_back(id);
    }
  }
}

void Simulator::StartCopy(uint32_t id) {
  Copy& c = copies_[id];
  const auto prefix = Chain(c.request).first(c.prefix_blocks);
  // A deferred copy may find its target already computed the prefix itself.
  const uint32_t held = nodes_[c.target]->hbm.Lookup(prefix);
  if (held == c.prefix_blocks) {
    DropCopy(id);
    return;
  }
  c.held_blocks = held;
  uint64_t bytes = 0;
  for (BlockIndex b : prefix.subspan(c.held_blocks)) bytes += replay_.catalog[b].bytes;
  c.started = true;
  result_.replication_bytes += bytes;
  ++result_.replications;
  StartTransfer(RdmaId(c.source), bytes, Tag(kCopy, id));
}

// Removes a copy that will not happen (its source lost the prefix, or its
// target already has it).
void Simulator::DropCopy(uint32_t id) {
  Copy& c = copies_[id];
  c.finished = true;
  Node& target = *nodes_[c.target];
  RemovePending(target, Chain(c.request).first(c.prefix_blocks));
  std::erase(target.incoming, id);
  Unblock(c.target, id);
}

// The requests parked on `node` for copy `id` (which arrived, or will not
// come soon) go back to the head of its queue, in their order.
void Simulator::Unblock(uint32_t n, uint32_t id) {
  Node& node = *nodes_[n];
  bool any = false;
  for (auto it = node.parked.rbegin(); it != node.parked.rend(); ++it) {
    if (it->second != id) continue;
    node.queue.push_front(it->first);
    any = true;
  }
  if (!any) return;
  std::erase_if(node.parked, [id](const auto& p) { return p.second == id; });
  StartNext(n);
}

// Whether a request should wait for copy `c`, not yet started, rather than
// recompute the prefix: only when the source is running the request that
// computes the prefix (so the wait is bounded by that prefill plus the copy)
// and that wait is shorter than recomputing the prefix.
bool Simulator::WorthWaiting(const Copy& c) const {
  const Node& source = *nodes_[c.source];
  if (source.current == kNone) return false;
  const auto prefix = Chain(c.request).first(c.prefix_blocks);
  const auto running = Chain(source.current);
  if (running.size() < c.prefix_blocks || running[c.prefix_blocks - 1] != prefix.back()) {
    return false;
  }
  uint64_t bytes = 0, tokens = 0, held_tokens = 0;
  for (uint32_t i = 0; i < prefix.size(); ++i) {
    const BlockMeta& m = replay_.catalog[prefix[i]];
    (i < c.held_blocks ? held_tokens : tokens) += m.tokens;
    if (i >= c.held_blocks) bytes += m.bytes;
  }
  tokens += held_tokens;
  // The copies queued behind this source share its NIC.
  const double copy_ms = static_cast<double>(bytes) * std::max<size_t>(1, source.deferred.size()) /
                         cost_.LinkBytesPerMs();
  return source.prefill_end_ms - now_ + copy_ms < PrefillMs(held_tokens, tokens);
}

absl::Status Simulator::FinishCopy(uint32_t id) {
  Copy& c = copies_[id];
  c.finished = true;
  Node& target = *nodes_[c.target];
  const auto prefix = Chain(c.request).first(c.prefix_blocks);
  uint64_t inserted = 0, evicted = 0;
  if (auto s = AdmitToHbm(target, prefix, c.prefix_blocks, Access(c.request), inserted, evicted);
      !s.ok()) {
    return s;
  }
  RemovePending(target, prefix);
  std::erase(target.incoming, id);
  Unblock(c.target, id);
  ServeDeferred(c.target);
  return absl::OkStatus();
}

// Starts the copies waiting on node n whose prefix n now holds; drops those
// whose prefix n will no longer get.
void Simulator::ServeDeferred(uint32_t n) {
  Node& node = *nodes_[n];
  if (node.deferred.empty()) return;
  std::vector<uint32_t> waiting;
  for (uint32_t id : node.deferred) {
    const Copy& c = copies_[id];
    const BlockIndex deepest = Chain(c.request)[c.prefix_blocks - 1];
    if (node.hbm.pool().IsResident(deepest)) {
      StartCopy(id);
    } else if (node.pending.contains(deepest)) {
      waiting.push_back(id);
      Unblock(copies_[id].target, id);  // a later request computes it: do not wait
    } else {
      DropCopy(id);
    }
  }
  node.deferred = std::move(waiting);
}

void Simulator::StartNext(uint32_t n) {
  Node& node = *nodes_[n];
  if (node.current != kNone) return;
  while (!node.queue.empty()) {
    const uint32_t ri = node.queue.front();
    node.queue.pop_front();
    if (std::isnan(head_ms_[ri])) head_ms_[ri] = now_;
    const uint32_t copy = CopyToWaitFor(n, ri);
    if (copy != kNone) {
      node.parked.emplace_back(ri, copy);
      continue;
    }
    node.current = ri;
    // Reset when nothing waits so rounding never accumulates.
    node.queued_ms =
        node.queue.empty() && node.parked.empty() ? 0 : node.queued_ms - estimate_ms_[ri];
    node.start_ms = head_ms_[ri];
    Begin(n);
    return;
  }
}

// A copy of request ri's prefix on its way to node n, or about to be (see
// WorthWaiting), that ri should wait for rather than recompute; kNone if
// none.
uint32_t Simulator::CopyToWaitFor(uint32_t n, uint32_t ri) const {
  const Node& node = *nodes_[n];
  const auto chain = Chain(ri);
  for (uint32_t id : node.incoming) {
    const Copy& c = copies_[id];
    if (chain.size() < c.key_blocks) continue;
    if (chain[c.key_blocks - 1] != Chain(c.request)[c.key_blocks - 1]) continue;
    if (node.hbm.Lookup(chain) >= std::min<size_t>(c.prefix_blocks, chain.size())) continue;
    if (!c.started && !WorthWaiting(c)) continue;
    return id;
  }
  return kNone;
}

void Simulator::Begin(uint32_t n) {
  Node& node = *nodes_[n];
  const uint32_t ri = node.current;
  const TraceRequest& r = trace_.requests[ri];
  const auto chain = Chain(ri);
  const BlockCatalog& catalog = replay_.catalog;

  // Load blocks [kh, j) (from DRAM where it holds them, else from the pool)
  // and recompute the rest: pick the j with the least estimated time.
  const uint32_t kh = node.hbm.Lookup(chain);
  const LoadChoice choice = ChooseLoads(n, chain, r.input_length, kh);

  const AccessInfo access = Access(ri);
  node.hbm.Touch(chain, kh, access);
  const uint32_t from_dram_end = std::min(choice.dram_blocks, choice.end);
  if (node.dram) node.dram->Touch(chain, from_dram_end, access);
  // The pool is told of a use only for the blocks it serves, past what the
  // node's HBM and DRAM served: a KV store behind the engine (LMCache's
  // backends, Mooncake's store) answers a lookup without refreshing an
  // entry and refreshes it when the entry is read. The DRAM tier shares the
  // node's prefix tree with HBM (SGLang's HiCache keeps one radix node for
  // both copies), so an HBM hit refreshes its copy there too.
  if (pool_) {
    pool_->Touch(chain, std::min(choice.pool_blocks, choice.end), access,
                 std::max(kh, from_dram_end));
  }

  uint64_t dram_bytes = 0, pool_bytes = 0;
  for (uint32_t j = kh; j < choice.end; ++j) {
    (j < choice.dram_blocks ? dram_bytes : pool_bytes) += catalog[chain[j]].bytes;
  }
  node.used_blocks = choice.end;
  node.used_tokens = choice.tokens;
  node.hbm_blocks = kh;
  node.dram_blocks = from_dram_end > kh ? from_dram_end - kh : 0;
  node.pool_blocks = choice.end - kh - node.dram_blocks;
  node.loaded_bytes = dram_bytes + pool_bytes;
  node.dram_loaded_bytes = dram_bytes;
  node.pool_loaded_bytes = pool_bytes;
  node.begin_ms = now_;
  node.prefill_ms = PrefillMs(choice.tokens, r.input_length);
  node.prefill_end_ms = now_ + choice.ms;  // estimate: loads at nominal bandwidth
  node.pending_loads = 0;
  if (dram_bytes > 0) {
    ++node.pending_loads;
    StartTransfer(PcieId(n), dram_bytes, Tag(kLoad, n));
  }
  if (pool_bytes > 0) {
    ++node.pending_loads;
    StartTransfer(RdmaId(n), pool_bytes, Tag(kLoad, n));
  }
  if (node.pending_loads == 0) LoadsDone(n);
}

void Simulator::LoadsDone(uint32_t n) {
  Node& node = *nodes_[n];
  node.loads_done_ms = now_;
  node.prefill_end_ms = now_ + node.prefill_ms;
  Push(now_ + node.prefill_ms, EventKind::kPrefillDone, n);
}

absl::Status Simulator::PrefillDone(uint32_t n) {
  Node& node = *nodes_[n];
  const uint32_t ri = node.current;
  const TraceRequest& r = trace_.requests[ri];
  const auto chain = Chain(ri);
  const AccessInfo access = Access(ri);
  const uint32_t blocks = r.num_blocks;

  uint64_t hbm_in = 0, hbm_evicted = 0;
  if (auto s = AdmitToHbm(node, chain, blocks, access, hbm_in, hbm_evicted); !s.ok()) {
    return s;
  }
  if (node.dram) {
    uint64_t dram_in = 0, dram_evicted = 0;
    if (auto s =
            node.dram->Admit(chain, 0, blocks, access, dram_in, dram_evicted, [](BlockIndex) {});
        !s.ok()) {
      return s;
    }
    result_.dram_write_bytes += dram_in;
    if (dram_in > 0) StartTransfer(PcieId(n), dram_in, Tag(kBackground, 0));
  }
  uint64_t admitted = 0, pool_evicted = 0;
  if (pool_) {
    // Other nodes' requests ran since this one started; re-pin its prefix as
    // the walk goes so making room never evicts the blocks it builds on.
    pool_->UnpinAll();
    if (auto s = pool_->Admit(chain, 0, blocks, access, admitted, pool_evicted, [](BlockIndex) {});
        !s.ok()) {
      return s;
    }
    if (admitted > 0) StartTransfer(RdmaId(n), admitted, Tag(kBackground, 0));
  }
  RemovePending(node, chain);
  --node.load;
  ++completed_;

  if (ri >= eval_start_) {
    const RequestOutcome outcome{node.used_blocks, node.used_tokens, node.loaded_bytes, admitted,
                                 pool_evicted};
    // Transfer time at nominal bandwidth: DRAM loads over PCIe, pool loads
    // and the admission over RDMA with their per-transfer latency, as the
    // pool replay prices them.
    const double transfer_ms =
        static_cast<double>(node.dram_loaded_bytes) / BytesPerMs(cost_.hardware().pcie_gb_per_s) +
        cost_.TransferMs(node.pool_loaded_bytes) + cost_.TransferMs(admitted);
    const double busy_ms = node.loads_done_ms - node.begin_ms + node.prefill_ms;
    AddRequest(result_.replay, r, outcome,
               {node.prefill_ms, cost_.GpusPerInstance(), transfer_ms, busy_ms});
    result_.hbm_hit_blocks += node.hbm_blocks;
    result_.dram_hit_blocks += node.dram_blocks;
    result_.pool_hit_blocks += node.pool_blocks;
    const double arrival = static_cast<double>(r.timestamp_ms);
    ttft_[ri - eval_start_] = now_ - arrival;
    queue_.push_back(node.start_ms - arrival);
    load_.push_back(node.loads_done_ms - node.start_ms);
    prefill_.push_back(node.prefill_ms);
  }
  node.current = kNone;
  ServeDeferred(n);
  StartNext(n);
  return absl::OkStatus();
}

absl::Status Simulator::LinkDone(uint32_t link) {
  const uint64_t tag = links_[link].PopCompletion();
  Push(links_[link].NextCompletionMs(), EventKind::kLinkDone, link, ++link_version_[link]);
  const uint64_t id = tag >> 2;
  switch (tag & 3) {
    case kLoad: {
      Node& node = *nodes_[id];
      if (--node.pending_loads == 0) LoadsDone(static_cast<uint32_t>(id));
      return absl::OkStatus();
    }
    case kCopy:
      return FinishCopy(static_cast<uint32_t>(id));
    default:
      return absl::OkStatus();
  }
}

absl::StatusOr<ClusterResult> Simulator::Run() {
  if (!(o_.eval_from >= 0 && o_.eval_from < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_from must be in [0, 1), got ", o_.eval_from));
  }
  if (o_.prefill_nodes == 0) return absl::InvalidArgumentError("prefill nodes must be >= 1");
  const HardwareProfile& hw = cost_.hardware();
  if (!(hw.rdma_gb_per_s > 0) || !(hw.pcie_gb_per_s > 0)) {
    return absl::InvalidArgumentError("RDMA and PCIe bandwidths must be > 0");
  }
  if (cost_.form() == RecomputeForm::kFlops && !(hw.peak_tflops > 0 && hw.mfu > 0)) {
    return absl::InvalidArgumentError("the flops cost model needs peak TFLOP/s and MFU > 0");
  }
  auto setup = ResolveRouterName(o_.router);
  if (!setup.ok()) return setup.status();
  auto router = CreateRouter(setup->routing, o_.cache_aware);
  if (!router.ok()) return router.status();
  router_ = std::move(*router);
  ReplicationOptions replication = o_.replication;
  replication.model = o_.model;
  replication.features.link_bytes_per_ms = cost_.LinkBytesPerMs();
  auto replicator = CreateReplicationPolicy(setup->replication, replication);
  if (!replicator.ok()) return replicator.status();
  replicator_ = std::move(*replicator);

  for (uint32_t n = 0; n < o_.prefill_nodes; ++n) {
    auto node = std::make_unique<Node>(&replay_.catalog, o_.hbm_bytes_per_node);
    if (auto s = StartPolicy(node->hbm, false); !s.ok()) return s;
    if (o_.dram_bytes_per_node > 0) {
      auto dram = NewTier(o_.dram_bytes_per_node, false);
      if (!dram.ok()) return dram.status();
      node->dram = std::move(*dram);
    }
    nodes_.push_back(std::move(node));
    links_.emplace_back(BytesPerMs(hw.rdma_gb_per_s));
    links_.emplace_back(BytesPerMs(hw.pcie_gb_per_s));
  }
  link_version_.assign(links_.size(), 0);
  if (o_.pool_bytes > 0) {
    auto pool = NewTier(o_.pool_bytes, true);
    if (!pool.ok()) return pool.status();
    pool_ = std::move(*pool);
  }

  const auto n = static_cast<uint32_t>(trace_.requests.size());
  eval_start_ = static_cast<uint32_t>(o_.eval_from * n);
  ttft_.assign(n - eval_start_, 0.0);
  estimate_ms_.assign(n, 0.0);
  head_ms_.assign(n, std::numeric_limits<double>::quiet_NaN());
  result_.router = o_.router;
  result_.replay.policy = o_.retention_policy;
  result_.replay.prefill_nodes = o_.prefill_nodes;

  const auto wall_start = std::chrono::steady_clock::now();
  uint32_t next = 0;
  while (true) {
    const double t_event =
        events_.empty() ? std::numeric_limits<double>::infinity() : events_.top().t;
    const double t_arrival = next < n ? static_cast<double>(trace_.requests[next].timestamp_ms)
                                      : std::numeric_limits<double>::infinity();
    if (t_event == std::numeric_limits<double>::infinity() &&
        t_arrival == std::numeric_limits<double>::infinity()) {
      break;
    }
    // At equal times events (completions) go first, so a node freed at t can
    // take a request arriving at t.
    if (t_event <= t_arrival) {
      const Event e = events_.top();
      events_.pop();
      if (e.kind == EventKind::kLinkDone && e.version != link_version_[e.target]) continue;
      now_ = e.t;
      const absl::Status s =
          e.kind == EventKind::kLinkDone ? LinkDone(e.target) : PrefillDone(e.target);
      if (!s.ok()) return s;
    } else {
      now_ = t_arrival;
      Arrive(next++);
    }
    if (o_.after_event) o_.after_event(*this);
  }
  if (completed_ != n) {
    return absl::InternalError(
        absl::StrCat("cluster replay finished ", completed_, " of ", n, " requests"));
  }

  ClusterResult& out = result_;
  out.replay.replay_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  out.replay.replayed_accesses = replay_.block_accesses();
  if (o_.keep_ttft_samples) out.ttft_samples_ms = ttft_;
  out.replay.ttft_ms = Summarize(ttft_);
  out.queue_ms = Summarize(queue_);
  out.load_ms = Summarize(load_);
  out.prefill_ms = Summarize(prefill_);
  out.burst_triggers = replicator_->triggers();
  for (const Link& l : links_) out.link_bytes += l.started_bytes();
  return std::move(out);
}

}  // namespace

void FillClusterCapacities(const CostModel& cost, ClusterOptions& options) {
  options.hbm_bytes_per_node = static_cast<uint64_t>(cost.KvHbmBytesPerInstance());
  options.dram_bytes_per_node = static_cast<uint64_t>(cost.hardware().host_dram_gb_per_node * 1e9);
}

absl::StatusOr<ClusterResult> ReplayCluster(const ReplayTrace& replay, const CostModel& cost,
                                            const ClusterOptions& options) {
  Simulator sim(replay, cost, options);
  return sim.Run();
}

absl::StatusOr<uint32_t> SizeCluster(const ReplayTrace& replay, const CostModel& cost,
                                     const ClusterOptions& base, double target,
                                     ClusterSizing* sizing) {
  PoolReplayOptions pool_options;
  pool_options.pool_bytes = base.pool_bytes;
  pool_options.eval_from = base.eval_from;
  auto start = SizePoolReplay(replay, cost, pool_options, target);
  if (!start.ok()) return start.status();
  absl::flat_hash_map<uint32_t, double> utilization;
  const auto measure = [&](uint32_t nodes) -> absl::StatusOr<double> {
    if (auto it = utilization.find(nodes); it != utilization.end()) return it->second;
    ClusterOptions o = base;
    o.prefill_nodes = nodes;
    o.router = "round-robin";
    o.retention_policy = "lru";
    o.model = nullptr;
    o.keep_ttft_samples = false;
    o.after_event = nullptr;
    auto r = ReplayCluster(replay, cost, o);
    if (!r.ok()) return r.status();
    utilization[nodes] = r->replay.utilization();
    return r->replay.utilization();
  };
  uint32_t nodes = *start;
  for (int move = 0; move < 8; ++move) {
    auto u = measure(nodes);
    if (!u.ok()) return u.status();
    // Busy time is utilization * nodes * window: the count it asks for.
    const auto wanted = static_cast<uint32_t>(std::max(1.0, std::ceil(*u * nodes / target - 1e-9)));
    if (wanted == nodes) break;
    nodes = wanted;
  }
  while (true) {
    auto u = measure(nodes);
    if (!u.ok()) return u.status();
    if (*u <= target) break;
    ++nodes;
  }
  while (nodes > 1) {
    auto u = measure(nodes - 1);
    if (!u.ok()) return u.status();
    if (*u > target) break;
    --nodes;
  }
  if (sizing != nullptr) {
    sizing->utilization = utilization[nodes];
    sizing->replays = static_cast<uint32_t>(utilization.size());
  }
  return nodes;
}

}  // namespace kvlearn
