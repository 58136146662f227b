// Membership of a group of `kvlearn serve` replicas in a JetStream key-value
// bucket, and which replica owns a serving node (rendezvous hashing over the
// live members). `kvlearn serve --replica-group` joins one
// (server/replica_ownership.h shares the nodes; docs/scale_out.md).
//
// Each member puts key `name` = its address in bucket `bucket` every
// heartbeat_seconds; the bucket's TTL (ttl_seconds, the stream's max age)
// removes a member that stops (killed, cut off) within ttl_seconds of its
// last heartbeat; Leave deletes the key at once. Members() is the view of
// the last refresh (every heartbeat): the keys the bucket holds, sorted.
//
// Ownership: a node belongs to the member whose Score(member, node) is
// highest (ties: the smaller name), a hash that is the same in every process
// and build. So every replica with the same view names the same owner, and
// a member's leaving moves only its own nodes, spread over the others.
//
// Thread-safety: every method from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jetstream_connection.h"

typedef struct __kvStore kvStore;

namespace kvlearn {

struct ReplicaGroupOptions {
  JetStreamOptions connection;  // url required
  std::string bucket = "kvlearn-replicas";
  std::string name;     // 1..64 of [A-Za-z0-9_-]: a key of the bucket
  std::string address;  // what other replicas and clients dial, e.g. 10.0.0.5:50051
  double ttl_seconds = 3;
  double heartbeat_seconds = 1;  // REQUIRES: < ttl_seconds
};

struct ReplicaMember {
  std::string name;
  std::string address;
  bool operator==(const ReplicaMember&) const = default;
};

class ReplicaGroup {
 public:
  // Connects, creates the bucket if missing (with this TTL), joins (a first
  // heartbeat) and starts heartbeating.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Join(ReplicaGroupOptions options);
  ~ReplicaGroup();  // Leave()
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  // Stops heartbeating and deletes this member's key. Idempotent.
  void Leave();
  // Stops heartbeating without deleting the key, as a killed replica would:
  // the TTL removes it. For tests.
  void StopHeartbeats();

  // The live members as of the last refresh, sorted by name (this one
  // included once its first heartbeat is read back).
  std::vector<ReplicaMember> Members() const;
  // Reads the bucket now (the heartbeat thread does it every beat).
  absl::Status Refresh();
  // The owner of `node` among Members(); empty when there is none.
  ReplicaMember OwnerOf(std::string_view node) const;
  // Counts the refreshes that changed Members(): a reader that saw the same
  // generation before has the same view.
  uint64_t generation() const;
  const std::string& name() const { return options_.name; }
  const std::string& address() const { return options_.address; }

  // The rendezvous score of `member` for `node`: FNV-1a 64 of
  // member '\0' node, then the SplitMix64 finalizer.
  static uint64_t Score(std::string_view member, std::string_view node);
  // The owner of `node` among `members` (empty when there is none).
  static ReplicaMember Owner(const std::vector<ReplicaMember>& members, std::string_view node);

 private:
  explicit ReplicaGroup(ReplicaGroupOptions options) : options_(std::move(options)) {}
  absl::Status Beat();
  void Run();
  void StopThread();

  ReplicaGroupOptions options_;
  std::unique_ptr<JetStreamConnection> connection_;
  kvStore* kv_ = nullptr;
  std::thread thread_;
  std::mutex mu_;  // guards stop_, left_
  std::condition_variable wake_;
  bool stop_ = false;
  bool left_ = false;
  mutable std::mutex members_mu_;
  std::vector<ReplicaMember> members_;  // guarded by members_mu_
  uint64_t generation_ = 0;             // guarded by members_mu_
};

}  // namespace kvlearn
