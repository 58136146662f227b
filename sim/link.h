// A network or bus link (RDMA NIC, PCIe, ...) whose bandwidth is shared
// equally by the transfers in flight on it (processor sharing): with n
// transfers active each progresses at bandwidth / n.
//
// Exact, event by event, via virtual time: V(t) is the bytes each active
// transfer has received since the link was built; it grows at bandwidth / n.
// A transfer of b bytes started when V = v finishes when V reaches v + b, so
// the next completion is the smallest finish tag and its wall time follows
// from the current n. Start and completion are O(log n).
//
// The owner drives time forward: Start(now, ...) and PopCompletion() must be
// called with non-decreasing times. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <queue>
#include <vector>

namespace kvlearn {

class Link {
 public:
  // `bytes_per_ms` > 0 (1 GB/s = 1e6 bytes per ms).
  explicit Link(double bytes_per_ms) : bytes_per_ms_(bytes_per_ms) {}

  // Starts a transfer at `now_ms`; `tag` is handed back when it completes.
  // A zero-byte transfer completes at `now_ms`.
  void Start(double now_ms, uint64_t bytes, uint64_t tag);

  // Absolute time of the next completion; +infinity when idle.
  double NextCompletionMs() const;

  // Advances to NextCompletionMs() and returns the tag of the transfer that
  // completes then (ties: the one started first).
  // REQUIRES: active() > 0.
  uint64_t PopCompletion();

  size_t active() const { return heap_.size(); }
  double now_ms() const { return now_ms_; }
  double bytes_per_ms() const { return bytes_per_ms_; }
  uint64_t started_bytes() const { return started_bytes_; }
  uint64_t completed_bytes() const { return completed_bytes_; }
  uint64_t transfers() const { return transfers_; }

 private:
  struct Pending {
    double finish_v;  // virtual time at which it completes
    uint64_t order;   // start order, breaks ties
    uint64_t bytes;
    uint64_t tag;
    bool operator>(const Pending& o) const {
      return finish_v != o.finish_v ? finish_v > o.finish_v : order > o.order;
    }
  };

  void AdvanceTo(double t);

  double bytes_per_ms_;
  double now_ms_ = 0;
  double virtual_bytes_ = 0;
  uint64_t started_bytes_ = 0;
  uint64_t completed_bytes_ = 0;
  uint64_t transfers_ = 0;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> heap_;
};

}  // namespace kvlearn
