// The batch ids the sidecar has applied, so that a client that resends a
// ReportEvents batch whose acknowledgement it lost (a timeout, a dropped
// connection) does not get its events applied and logged twice.
//
// A batch is named by (source, batch_id), both chosen by the client
// (kvlearn.v1.EventBatch). Bounded memory: the last kIdsPerSource ids of
// each source, and at most kSources sources (the one that sent nothing for
// longest is forgotten first). A resend older than that window is applied
// again. The ids survive a restart because each one is logged as a
// batch_received event right after its batch's events, in the same log
// entry, and the start-up replay remembers it again (NodePools::Apply).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvlearn/v1/retention.pb.h"
#include "server/request_validation.h"

namespace kvlearn {

class RetriedBatches {
 public:
  static constexpr size_t kIdsPerSource = 4096;
  static constexpr size_t kSources = 65536;
  static constexpr size_t kMaxSourceBytes = kMaxStringFieldBytes;

  // The source a batch is numbered by: its `source`, else its first event's
  // node id.
  static std::string SourceOf(const v1::EventBatch& batch);
  // True when the batch is new (or has no id), and remembers its id; false
  // for a resend; INVALID_ARGUMENT naming the field for a source over
  // kMaxStringFieldBytes (StringFieldTooLong).
  absl::StatusOr<bool> Claim(const v1::EventBatch& batch);
  // The same by parts (batch_received events).
  bool Claim(std::string_view source, uint64_t batch_id);
  // The batch_received event to log after the batch's events; false when the
  // batch has no id.
  static bool Marker(const v1::EventBatch& batch, v1::Event* event);

 private:
  struct Window {
    std::deque<uint64_t> order;  // oldest first
    absl::flat_hash_set<uint64_t> ids;
    std::list<std::string>::iterator recency;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> recency_ ABSL_GUARDED_BY(mu_);  // most recent first
};

}  // namespace kvlearn
