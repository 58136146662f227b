// Which serving nodes this replica of a group serves (`kvlearn serve
// --replica-group`, docs/scale_out.md): the ReplicaGroup's view names each
// node's owner (rendezvous hashing over the live members), and this object
// adds what the replica has built of each node's pool.
//
// A node is *followed* once this replica applies its events: from the moment
// it first owned the node (its pool rebuilt from the stream then, by
// server/nats_ingest.h) or since start-up (a pool the log restored). A
// followed node stays followed while another replica owns it, so a node
// that comes back finds its pool current; nothing is ever unfollowed.
// A node is *known* once a message of its subject was seen (or the stream
// listed it at start).
//
// A call about `node` is routed:
//   - another member owns it: redirected (FAILED_PRECONDITION, that member's
//     address in trailing metadata kOwnerMetadataKey);
//   - this replica owns it but has not rebuilt it yet (known, not followed):
//     UNAVAILABLE, "try again";
//   - else served here.
// Before a group is attached (the replica still joining) every call is
// UNAVAILABLE.
//
// Thread-safety: every method from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/replica_group.h"

namespace kvlearn {

// The address a replica advertises: `advertise` as HOST:PORT, or HOST (or
// HOST:0) with the port the server bound. INVALID_ARGUMENT naming
// --advertise when it is empty or its port is not a number.
absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise, int bound_port);
// A replica name made from an address: every character outside
// [A-Za-z0-9_-] becomes '-' (10.0.0.5:50051 -> 10-0-0-5-50051).
std::string ReplicaNameOf(std::string_view address);

class ReplicaOwnership {
 public:
  // The trailing metadata key of a redirect: the owner's address (HOST:PORT,
  // as it advertised itself).
  static constexpr char kOwnerMetadataKey[] = "kvlearn-owner";
  // The same for the owner's replica name.
  static constexpr char kOwnerNameMetadataKey[] = "kvlearn-owner-name";

  ReplicaOwnership() = default;
  ReplicaOwnership(const ReplicaOwnership&) = delete;
  ReplicaOwnership& operator=(const ReplicaOwnership&) = delete;

  // Attaches the joined group; calls are routed from then on.
  void Attach(std::unique_ptr<ReplicaGroup> group);
  // Leaves the group (its key deleted: the others take its nodes at their
  // next refresh). Idempotent.
  void Leave();
  // nullptr before Attach.
  ReplicaGroup* group() const { return group_.load(std::memory_order_acquire); }

  struct Route {
    enum Kind { kServe, kRebuilding, kRedirect, kJoining } kind = kServe;
    ReplicaMember owner;  // kRedirect: where to go
  };
  Route RouteOf(std::string_view node) const;
  // The status a call about `node` gets when RouteOf says not kServe, with
  // the metadata to add (empty for kServe: OK).
  absl::Status CallStatus(const Route& route, std::string_view node) const;

  // Whether the group's view gives `node` to this replica.
  bool Owns(std::string_view node) const;

  // For the ingest's apply thread.
  void NoteKnown(std::string_view node);
  void MarkFollowed(std::string_view node);
  bool Followed(std::string_view node) const;
  // The known nodes this replica owns and does not follow, sorted.
  std::vector<std::string> OwnedNotFollowed() const;
  // How many nodes are known and followed (for /metrics).
  uint64_t known_nodes() const;
  uint64_t followed_nodes() const;

 private:
  std::unique_ptr<ReplicaGroup> owned_group_;  // set once, by Attach
  std::atomic<ReplicaGroup*> group_{nullptr};
  mutable absl::Mutex mu_;
  // Known nodes, each with whether it is followed.
  absl::flat_hash_map<std::string, bool> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvlearn
