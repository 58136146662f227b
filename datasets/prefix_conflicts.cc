#include "datasets/prefix_conflicts.h"

#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvlearn {
namespace {

// A block id's parent as first seen; `root` when it began a chain.
struct Parent {
  uint64_t id = 0;
  bool root = false;
  bool operator==(const Parent&) const = default;
};

Parent ParentAt(std::span<const uint64_t> ids, size_t i) {
  return i == 0 ? Parent{0, true} : Parent{ids[i - 1], false};
}

}  // namespace

DroppedRequests DropRequestsBreakingPrefixes(Trace& trace) {
  DroppedRequests dropped;
  absl::flat_hash_map<uint64_t, Parent> parent_of;
  std::vector<TraceRequest> kept;
  std::vector<uint64_t> kept_ids;
  for (const TraceRequest& r : trace.requests) {
    const std::span<const uint64_t> ids = trace.BlocksOf(r);
    bool agrees = true;
    for (size_t i = 0; i < ids.size() && agrees; ++i) {
      const auto it = parent_of.find(ids[i]);
      agrees = it == parent_of.end() || it->second == ParentAt(ids, i);
    }
    if (!agrees) {
      if (dropped.requests++ == 0) dropped.first_line = r.line;
      continue;
    }
    for (size_t i = 0; i < ids.size(); ++i) parent_of.try_emplace(ids[i], ParentAt(ids, i));
    TraceRequest moved = r;
    moved.first_block = static_cast<uint32_t>(kept_ids.size());
    kept_ids.insert(kept_ids.end(), ids.begin(), ids.end());
    kept.push_back(moved);
  }
  if (dropped.requests > 0) {
    trace.requests = std::move(kept);
    trace.hash_ids = std::move(kept_ids);
  }
  return dropped;
}

}  // namespace kvlearn
