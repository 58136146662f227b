// Open ReportEvents streams per peer, bounded by --max-streams-per-peer, so
// that one client cannot hold every --max-streams slot (idle streams cost
// it nothing) and lock the other reporters out.
//
// A peer is who the stream counts against (StreamPeer): with authentication
// the credentials the call presented (its bearer token, or its client
// certificate's identity: one principal each); without, the peer's IP
// address without its port, so every client on one machine, loopback
// included, is one peer.
//
// Metrics: kvlearn_report_stream_peers (gauge: peers with a stream open)
// and kvlearn_report_streams_peer_refused_total (streams refused by the
// bound).
//
// Thread-safety: every method may be called concurrently (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace grpc {
class ServerContextBase;
}

namespace kvlearn {

// The key a call's streams count against; `authenticated`: the server
// checks credentials (the key then never leaves this process).
std::string StreamPeer(const grpc::ServerContextBase& context, bool authenticated);

class PeerStreamSlots {
 public:
  // 0: no bound.
  explicit PeerStreamSlots(uint32_t max_per_peer) : max_per_peer_(max_per_peer) {}

  // Counts a stream of `peer` open if it has fewer than the bound; else
  // counts a refusal and returns false.
  bool TryOpen(const std::string& peer);
  // REQUIRES: a TryOpen(peer) that returned true and was not closed.
  void Close(const std::string& peer);

  uint32_t max_per_peer() const { return max_per_peer_; }
  uint32_t open(const std::string& peer) const;
  uint64_t refused() const;

  std::string Render() const;

 private:
  const uint32_t max_per_peer_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> open_;  // guarded by mu_; no zero entries
  uint64_t refused_ = 0;                             // guarded by mu_
};

}  // namespace kvlearn
