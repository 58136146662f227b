// RetentionClient: what a serving engine links to ask the kvlearn sidecar what
// to keep, without ever waiting on it longer than a deadline.
//
// One client speaks for one (node, tier) pool and follows the sidecar's call
// protocol (docs/sidecar.md): ReportArrival with the prompt's chain (and a
// request id), ReportHits (deepest first), then per new block Admit,
// RankEviction when short of room (it proposes; the sidecar's view changes
// when ReportRemoved confirms a victim), ReportRemoved for the victims the
// engine drops and ReportStored; ReportFinished when the request ends.
//
// Events are buffered in memory (no I/O in the Report* calls) and sent as one
// ReportEvents batch by Flush(), which Admit and RankEviction call first so the
// sidecar sees them in protocol order. Admit and RankEviction have one
// deadline (`call_deadline`) covering that flush and the decision RPC
// together; Flush() has `flush_deadline`. Past it the call is cancelled and
// answered from the local fallback: Admit keeps every candidate, RankEviction
// picks least recently used leaves among the blocks the client has seen
// stored (clients/fallback_lru.h).
//
// Every batch carries a batch_id (a counter from a random start, so a
// restarted client does not reuse its predecessor's ids) and a source
// ("<node_id>#<tier>", so two tiers of a node number apart; the node id alone
// when that is over 128 bytes), which make a resend idempotent in the sidecar.
// A flush that fails without a refusal (DEADLINE_EXCEEDED, UNAVAILABLE, ...)
// may have been applied, so its batch is held: the next Flush() sends it
// again first, same id, same events, and the sidecar acknowledges it as a
// duplicate if it had it; newer events buffer behind it, the held ones
// counting in max_buffered_events. Until that resend is acknowledged the
// sidecar's view is stale, so Admit and RankEviction answer locally without
// asking it.
//
// Events are dropped only when the buffer is full, the breaker is open or the
// sidecar refused the batch (INVALID_ARGUMENT, ...: it would refuse it again).
// Then, until it is repaired, Admit and RankEviction answer locally, events
// are not buffered, and the next Flush() resends the pool instead (a resync):
// all_blocks_cleared, pool_configured, then block_stored for every block the
// fallback tracks, parents first (the fallback reflects every reported event).
// The sidecar's policy state for the pool restarts from there, so an engine
// calls Flush() regularly (after each request, or from a timer) and picks
// deadlines above the sidecar's p99.
//
// Circuit breaker: after `breaker_failures` consecutive failures that say the
// sidecar is unreachable or slow (UNAVAILABLE, DEADLINE_EXCEEDED, ...), calls
// skip the sidecar for `breaker_backoff` and answer locally at once; the first
// call after the backoff probes it again (success closes the breaker, failure
// reopens it). Answers that prove the sidecar alive (INVALID_ARGUMENT,
// NOT_FOUND, FAILED_PRECONDITION, and UNAUTHENTICATED / PERMISSION_DENIED for
// a wrong or missing token) fall back for that call only.
//
// Replica groups (docs/scale_out.md): a replica answers a decision about a
// node another replica owns with FAILED_PRECONDITION and the owner's address
// in trailing metadata "kvlearn-owner". The client then moves to that
// address (every later call, Flush included, goes there) and asks the same
// decision there once, within the same deadline; a second redirect, or none
// in time, is a fallback answer like any other failure. A call to a
// redirected target that fails as unreachable (UNAVAILABLE, DEADLINE_EXCEEDED,
// ...: the owner may have died) sends the next call to options.target again,
// which names the new owner.
//
// Only proto + gRPC + absl: an engine can link it without the rest of kvlearn.
//
// Thread-safety: every method may be called from any thread (one mutex guards
// the buffer, the fallback and the counters; RPCs run outside it). The protocol
// itself is sequential per pool, so an engine drives one client from one
// thread at a time and reads Stats() from wherever it exports metrics.
#pragma once

#include <grpcpp/security/credentials.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "clients/fallback_lru.h"
#include "kvlearn/v1/retention.grpc.pb.h"

namespace kvlearn {

struct RetentionClientOptions {
  std::string target;                                     // host:port of the sidecar
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr: plaintext
  // A token of the sidecar's --auth-tokens file, sent on every call as
  // 'authorization: Bearer TOKEN'; empty: $KVLEARN_TOKEN if set, else none.
  std::string token;
  std::string node_id;  // [A-Za-z0-9._:/-], 1..128 characters
  v1::Tier tier = v1::TIER_POOL;
  // The whole of one Admit / RankEviction: pending events plus the decision.
  // 5 ms: `kvlearn loadgen` measures a ReportEvents p99 of ~2.2 ms and Admit
  // p99 ~0.3 ms on loopback (docs/sidecar.md).
  std::chrono::microseconds call_deadline{5000};
  // One Flush(), which may resend the whole pool (one event per block).
  std::chrono::microseconds flush_deadline{100000};
  size_t fallback_capacity_blocks = 1 << 20;  // blocks the local LRU remembers
  size_t max_buffered_events = 4096;          // the server's default batch limit
  uint32_t breaker_failures = 3;              // consecutive failures that open the breaker
  std::chrono::milliseconds breaker_backoff{1000};
  // Timestamp of events and decisions, microseconds on the node's clock.
  // Default: Unix time.
  std::function<int64_t()> now_us;
};

// A block the engine stores or asks to admit.
struct ClientBlock {
  uint64_t block_id = 0;
  std::optional<uint64_t> parent_id;  // absent for the first block of a chain
  int64_t tokens = 0;                 // > 0
  int64_t bytes = 0;                  // > 0
};

// A request arrived needing `block_ids` (root first), resident or not.
struct ClientArrival {
  std::vector<uint64_t> block_ids;
  int64_t input_length = 0;   // prompt tokens (0 = unknown)
  int64_t output_length = 0;  // generated tokens
  // Optional, parallel to block_ids. Without them the sidecar takes tokens from
  // input_length and bytes from its model profile until a block_stored (or
  // Admit candidate) gives the block's real size.
  std::vector<int64_t> block_tokens;
  std::vector<int64_t> block_bytes;
  // Optional (1..128 bytes): the chain stays pinned in the sidecar until
  // ReportFinished(request_id); without one, until the next arrival.
  std::string request_id;
  // Optional: leading blocks a cache in front of this pool served (the
  // engine's own prefix cache, for a KV store behind it); at most
  // block_ids.size().
  uint32_t served_above = 0;
};

struct ClientAdmitResult {
  std::vector<bool> keep;  // parallel to the candidates
  bool from_fallback = false;
};

struct ClientRankResult {
  std::vector<FallbackVictim> victims;  // evict in this order
  int64_t bytes_freed = 0;
  bool from_fallback = false;
};

// Counters since the client was made. Keys of the maps: "ReportEvents",
// "Admit", "RankEviction" (rpc), gRPC code names such as "UNAVAILABLE" (errors).
struct RetentionClientStats {
  std::map<std::string, uint64_t> calls_total;         // calls made by the engine
  std::map<std::string, uint64_t> rpc_attempts_total;  // of those, sent to the sidecar
  std::map<std::string, uint64_t> fallbacks_total;     // answered locally (incl. breaker skips)
  std::map<std::string, uint64_t> sidecar_errors_total;
  uint64_t breaker_skips_total = 0;  // calls answered locally without trying the sidecar
  uint64_t breaker_opens_total = 0;
  bool breaker_open = false;
  uint64_t events_sent_total = 0;      // acknowledged by the sidecar (accepted or rejected)
  uint64_t events_rejected_total = 0;  // refused by the sidecar (its summary)
  // Never acknowledged as such: buffer full, breaker open, refused flush, or
  // held or buffered when a resync (which carries their effect) superseded them.
  uint64_t events_dropped_total = 0;
  uint64_t resyncs_total = 0;         // pools resent after dropped events
  uint64_t batches_resent_total = 0;  // held batches sent again (same id, same events)
  uint64_t fallback_forgotten_total = 0;
  size_t fallback_blocks = 0;    // blocks the local LRU tracks now
  uint64_t redirects_total = 0;  // times a replica named another owner and the client moved
  std::string target;            // where calls go now (options.target until a redirect)
};

class RetentionClient {
 public:
  explicit RetentionClient(RetentionClientOptions options);
  ~RetentionClient();
  RetentionClient(const RetentionClient&) = delete;
  RetentionClient& operator=(const RetentionClient&) = delete;

  // Buffered events (no I/O; dropped and counted when the buffer is full).
  void ReportPoolConfigured(int64_t capacity_bytes);
  // Starts a new request (the previous one's blocks are no longer pinned in
  // the fallback).
  void ReportArrival(const ClientArrival& arrival);
  // The resident prefix the request uses, deepest first.
  void ReportHits(const std::vector<uint64_t>& block_ids_deepest_first);
  void ReportStored(const ClientBlock& block);
  void ReportRemoved(uint64_t block_id);
  // The request reported with this id ended: its blocks may be proposed.
  void ReportFinished(const std::string& request_id);

  // Sends the held batches and then the buffered events, or resends the pool
  // after a drop; false if that failed (sidecar failed or breaker open).
  // Returns within flush_deadline.
  bool Flush();

  // New blocks of one chain, root to leaf. Returns within call_deadline.
  ClientAdmitResult Admit(const std::vector<ClientBlock>& candidates);
  // Victims for `bytes_to_free` (> 0), optionally among `candidate_ids`.
  // Returns within call_deadline.
  ClientRankResult RankEviction(int64_t bytes_to_free,
                                const std::vector<uint64_t>& candidate_ids = {});

  RetentionClientStats Stats() const;

 private:
  enum class Attempt { kSend, kSkip };
  v1::Event* NewEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Attempt BeginAttempt(const char* rpc) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the outcome of one RPC for the breaker and the error counters.
  void RecordOutcome(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  void CountFallback(const char* rpc) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the buffer under an absolute deadline. When batches are held or a
  // resync is pending, only if `may_repair` (else returns false at once): the
  // held batches first, or the pool. False if the sidecar did not acknowledge.
  bool FlushUntil(std::chrono::system_clock::time_point deadline, bool may_repair);
  // The pool as events (see the header comment), in batches of at most
  // max_buffered_events.
  std::vector<v1::EventBatch> ResyncBatches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `batch` the next id and this client's source.
  void Number(v1::EventBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Events held and buffered: what max_buffered_events bounds.
  size_t BufferedEvents() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the authorization metadata, if there is a token.
  void Authorize(grpc::ClientContext& ctx) const;
  // The stub calls go to now.
  std::shared_ptr<v1::Retention::Stub> Stub() const ABSL_LOCKS_EXCLUDED(target_mu_);
  // After a decision `ctx`: if it was a replica group's redirect, moves to
  // the owner it names and returns true (ask again there); if the target
  // did not answer, goes back to options_.target (see above).
  bool FollowRedirect(const grpc::ClientContext& ctx, const grpc::Status& status)
      ABSL_LOCKS_EXCLUDED(target_mu_);
  // Runs a decision `rpc` on the current stub under `deadline`, and once
  // more at the owner a redirect names.
  grpc::Status AskFollowingRedirect(
      std::chrono::system_clock::time_point deadline,
      const std::function<grpc::Status(v1::Retention::Stub&, grpc::ClientContext&)>& rpc);

  const RetentionClientOptions options_;
  const std::string source_;   // of every batch (see the header comment)
  std::string authorization_;  // "Bearer TOKEN"; empty: no token
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex target_mu_;
  std::string target_ ABSL_GUARDED_BY(target_mu_);
  std::shared_ptr<v1::Retention::Stub> stub_ ABSL_GUARDED_BY(target_mu_);
  uint64_t redirects_ ABSL_GUARDED_BY(target_mu_) = 0;

  mutable absl::Mutex mu_;
  v1::EventBatch pending_ ABSL_GUARDED_BY(mu_);
  // Sent, not acknowledged, maybe applied: resent first (same ids).
  std::vector<v1::EventBatch> held_ ABSL_GUARDED_BY(mu_);
  FallbackLru fallback_ ABSL_GUARDED_BY(mu_);
  uint64_t next_batch_id_ ABSL_GUARDED_BY(mu_);
  bool resync_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int64_t> pool_capacity_bytes_ ABSL_GUARDED_BY(mu_);
  uint32_t consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point breaker_open_until_ ABSL_GUARDED_BY(mu_);
  RetentionClientStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
