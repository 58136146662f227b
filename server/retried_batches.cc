#include "server/retried_batches.h"

#include "absl/strings/str_cat.h"

namespace kvlearn {

std::string RetriedBatches::SourceOf(const v1::EventBatch& batch) {
  if (!batch.source().empty() || batch.events().empty()) return batch.source();
  return batch.events(0).node_id();
}

absl::StatusOr<bool> RetriedBatches::Claim(const v1::EventBatch& batch) {
  if (batch.source().size() > kMaxSourceBytes) {
    return StringFieldTooLong(absl::StrCat("source: must be at most ", kMaxSourceBytes,
                                           " bytes, got ", batch.source().size()));
  }
  return Claim(SourceOf(batch), batch.batch_id());
}

bool RetriedBatches::Claim(std::string_view source, uint64_t batch_id) {
  if (batch_id == 0) return true;
  const std::string key(source);
  absl::MutexLock lock(&mu_);
  auto it = windows_.find(key);
  if (it == windows_.end()) {
    if (windows_.size() >= kSources) {
      windows_.erase(recency_.back());
      recency_.pop_back();
    }
    recency_.push_front(key);
    it = windows_.emplace(key, Window{}).first;
    it->second.recency = recency_.begin();
  } else {
    recency_.splice(recency_.begin(), recency_, it->second.recency);
  }
  Window& w = it->second;
  if (!w.ids.insert(batch_id).second) return false;
  w.order.push_back(batch_id);
  if (w.order.size() > kIdsPerSource) {
    w.ids.erase(w.order.front());
    w.order.pop_front();
  }
  return true;
}

bool RetriedBatches::Marker(const v1::EventBatch& batch, v1::Event* event) {
  if (batch.batch_id() == 0) return false;
  event->Clear();
  if (!batch.events().empty()) event->set_node_id(batch.events(0).node_id());
  auto* m = event->mutable_batch_received();
  m->set_source(SourceOf(batch));
  m->set_batch_id(batch.batch_id());
  return true;
}

}  // namespace kvlearn
